"""manage.py mcp_gateway: the MCP gateway (holds/mcp/gateway.py) on its own ASGI server.

Its capability and upstreams come from agentos.yaml's `mcp.gateway` (holds/mcp/gateway_config.py);
clients connect to http://HOST:PORT/mcp with a service account's bearer key.
"""

from pathlib import Path

import uvicorn
from django.core.management.base import BaseCommand, CommandError

from holds.config import ConfigError
from holds.mcp.gateway import Gateway
from holds.mcp.gateway_config import load_gateway


class Command(BaseCommand):
    help = "Serve the MCP gateway in front of agentos.yaml's mcp.gateway.upstreams."

    def add_arguments(self, parser):
        parser.add_argument("--config", default="agentos.yaml")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8002)

    def handle(self, *args, **options):
        try:
            config = load_gateway(Path(options["config"]))
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        if config is None:
            raise CommandError(f"{options['config']} has no mcp.gateway section")
        _, app = Gateway(config).app()
        self.stdout.write(f"MCP gateway on http://{options['host']}:{options['port']}/mcp")
        uvicorn.run(app, host=options["host"], port=options["port"], log_level="info")
