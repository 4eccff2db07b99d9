"""`python tests/header_proxy.py TARGET KEY PORT`: forwards every request to TARGET with
`Authorization: Bearer KEY` added, streaming the answer back. The MCP conformance kit (0.1.10) has no
way to send a header, and /mcp answers nothing without its key."""

import sys

import httpx2 as httpx
import uvicorn

TARGET, KEY, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = httpx.AsyncClient(timeout=None)


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in (b"host", b"authorization", b"content-length")]
    headers.append((b"authorization", f"Bearer {KEY}".encode()))
    request = client.build_request(scope["method"], TARGET, headers=headers, content=body)
    response = await client.send(request, stream=True)
    await send(
        {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": [
                (k, v) for k, v in response.headers.raw if k.lower() not in (b"content-length", b"transfer-encoding")
            ],
        }
    )
    async for chunk in response.aiter_raw():
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
    await response.aclose()


uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
