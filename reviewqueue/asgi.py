"""The ASGI process: `/mcp` (holds/mcp) and, for anything else, the same Django app as gunicorn's.

uvicorn serves it (`make run`, README "Production"). An MCP call may wait for a person for as long as
the hold lives; here that wait is a coroutine, where in gunicorn it would hold one of a few sync workers.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewqueue.settings")
django_app = get_asgi_application()

from holds.mcp import server  # noqa: E402  (Django must be set up first)

mcp_starlette, mcp_app = server.app()


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        # The MCP app's lifespan runs its session manager; Django has none.
        return await mcp_starlette(scope, receive, send)
    if scope["type"] == "http" and scope["path"].rstrip("/") == "/mcp":
        return await mcp_app(scope, receive, send)
    return await django_app(scope, receive, send)
