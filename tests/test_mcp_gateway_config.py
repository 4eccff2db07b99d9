"""agentos.yaml's `mcp.gateway` section (holds/mcp/gateway_config.py)."""

import pytest

from holds.config import ConfigError
from holds.mcp.gateway_config import GatewayConfig, Upstream, parse_gateway

SECTION = {"capability": "mcp_gateway", "upstreams": {"files": "http://127.0.0.1:9000/mcp"}}


def test_a_section_names_its_capability_and_upstreams():
    assert parse_gateway(SECTION) == GatewayConfig(
        capability="mcp_gateway", upstreams=(Upstream(name="files", url="http://127.0.0.1:9000/mcp"),)
    )


def test_the_keys_read_before_rules_landed_point_to_rules():
    with pytest.raises(ConfigError) as refused:
        parse_gateway({**SECTION, "hold_tools": ["delete_file"], "hold_destructive": True, "color": "red"})
    problems = refused.value.problems
    assert [p.split(":")[0] for p in problems] == [
        "mcp.gateway.hold_destructive",
        "mcp.gateway.hold_tools",
        "mcp.gateway.color",
    ]
    assert "the capability's rules decide" in problems[0] and "unknown key" in problems[2]
