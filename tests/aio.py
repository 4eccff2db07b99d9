"""asyncio.run for the synchronous tests that drive an async client (MCP, the Claude CLI's SDK).

It runs the coroutine on a thread of its own: a pytest worker that ran a browser test keeps Playwright's
event loop (tests/browser/conftest.py's session-wide Chromium) marked as running on its main thread,
where asyncio.run then refuses ("cannot be called from a running event loop")."""

import asyncio
from concurrent.futures import ThreadPoolExecutor


def run(coroutine):
    with ThreadPoolExecutor(1, thread_name_prefix="asyncio-run") as pool:
        return pool.submit(asyncio.run, coroutine).result()
