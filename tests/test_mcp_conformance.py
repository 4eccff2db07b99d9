"""The MCP conformance kit (`@modelcontextprotocol/conformance`, pinned in package.json) against /mcp on
the real ASGI process, through a proxy that adds the service-account key (tests/header_proxy.py).

Every scenario of the kit (0.1.10) that applies to a server offering one tool and nothing else runs:
- the lifecycle and listings: server-initialize, ping, tools-list, resources-list and prompts-list
  (both empty, as they must be listed);
- server-sse-polling: a tools/call POST answered on an SSE stream (the SEP-1699 resumption checks are
  SHOULDs that a stateless server reports as warnings; no failure is allowed).
Not run, as they do not apply: tools-call-*, json-schema-2020-12, elicitation-sep1034/1330 and the
resources-read/prompts-get ones call the kit's own reference tools, resources and prompts
(test_simple_text, …), which /mcp does not have (they answer -32602 Unknown tool, as they should);
logging-set-level and completion-complete need capabilities /mcp does not declare (-32601 is the
spec's answer); server-sse-multiple-streams needs a session, and /mcp is stateless. The kit runs
offline (it is its own client).
"""

import re
import subprocess
import sys

import pytest
from django.db import connections

from tests import factories
from tests.conftest import require
from tests.processes import ROOT, Processes, _tcp_open, free_port, service_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis]
KIT = ROOT / "node_modules" / ".bin" / "conformance"
APPLICABLE = ["server-initialize", "ping", "tools-list", "resources-list", "prompts-list", "server-sse-polling"]


@pytest.fixture(scope="module")
def asgi(tmp_path_factory, django_db_setup, django_db_blocker):
    processes = Processes(tmp_path_factory.mktemp("conformance"))
    with django_db_blocker.unblock():
        url = processes.uvicorn(service_env(redis_url=processes.redis(free_port())), free_port())
    yield processes, url
    processes.stop_all()
    connections.close_all()


@pytest.mark.parametrize("scenario", APPLICABLE)
def test_the_conformance_kit_passes_against_mcp(asgi, scenario):
    require("the MCP conformance kit: run `npm ci` (node_modules/.bin/conformance)", KIT.exists())
    processes, url = asgi
    key = factories.account("conformance", role="member")[1]
    port = free_port()
    processes.start(f"proxy-{scenario}", [sys.executable, "tests/header_proxy.py", url + "/mcp", key, str(port)])
    wait_until(lambda: _tcp_open(port), 20, "the proxy")
    run = subprocess.run(
        [str(KIT), "server", "--url", f"http://127.0.0.1:{port}/mcp", "--scenario", scenario],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    passed = re.search(r"Passed: (\d+)/(\d+), 0 failed", run.stdout)
    assert passed and passed[1] == passed[2], run.stdout
