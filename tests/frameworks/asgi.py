"""An ASGI app (an AG-UI or A2A agent) served by uvicorn in a thread of the test process (on 127.0.0.1 unless
told another local address)."""

import threading

import uvicorn

from tests.processes import answers_http, free_port, wait_until


class Served:
    def __init__(self, app, path: str = "/", port: int | None = None, host: str = "127.0.0.1"):
        self.port = port or free_port()
        self.url = f"http://{host}:{self.port}"
        config = uvicorn.Config(app, host=host, port=self.port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        wait_until(lambda: answers_http(self.url + path), 20, "the agent to listen")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
