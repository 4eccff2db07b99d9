"""agentos.yaml's `mcp.gateway` section: the upstream MCP servers and which tool calls wait for a person.

```yaml
mcp:
  gateway:
    capability: mcp_gateway            # the capability its holds are asked under (declared above)
    upstreams:                         # name: streamable-HTTP URL, or {url, headers}
      files: http://127.0.0.1:9000/mcp
    hold_tools: [delete_file]          # tool names as clients see them
    hold_destructive: true             # and every tool annotated destructiveHint: true (a hint)
```
With one upstream, tools keep their names; with several, each is `<upstream>__<tool>`.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..config import NAME, ConfigError

KEYS = {"capability", "upstreams", "hold_tools", "hold_destructive"}


@dataclass(frozen=True)
class Upstream:
    name: str
    url: str
    headers: dict = field(default_factory=dict)


@dataclass(frozen=True)
class GatewayConfig:
    capability: str
    upstreams: tuple[Upstream, ...]
    hold_tools: frozenset[str] = frozenset()
    hold_destructive: bool = False


def load_gateway(path: Path) -> GatewayConfig | None:
    """The gateway's settings, or None when the file has no `mcp.gateway`; ConfigError names each problem."""
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError([f"{path}: {exc}"]) from None
    raw = (document.get("mcp") or {}).get("gateway") if isinstance(document.get("mcp"), dict) else None
    if raw is None:
        return None
    return parse_gateway(raw)


def parse_gateway(raw) -> GatewayConfig:
    problems = []
    if not isinstance(raw, dict):
        raise ConfigError(["mcp.gateway: a mapping"])
    problems += [f"mcp.gateway.{k}: unknown key (known: {', '.join(sorted(KEYS))})" for k in sorted(set(raw) - KEYS)]
    capability = raw.get("capability")
    if not isinstance(capability, str) or not NAME.match(capability):
        problems.append("mcp.gateway.capability: required, the name of a capability")
    upstreams = []
    if not isinstance(raw.get("upstreams"), dict) or not raw["upstreams"]:
        problems.append("mcp.gateway.upstreams: required, a mapping of names to URLs")
    else:
        for name, value in raw["upstreams"].items():
            url, headers = (value, {}) if isinstance(value, str) else (None, None)
            if isinstance(value, dict):
                url, headers = value.get("url"), value.get("headers") or {}
            if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9_-]{1,50}$", name):
                problems.append(f"mcp.gateway.upstreams: '{name}' is not a name (letters, digits, '_', '-')")
            elif not isinstance(url, str) or not re.match(r"^https?://\S+$", url):
                problems.append(f"mcp.gateway.upstreams.{name}: an http(s) URL, or {{url, headers}}")
            elif not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
                problems.append(f"mcp.gateway.upstreams.{name}.headers: a mapping of header names to strings")
            else:
                upstreams.append(Upstream(name=name, url=url, headers=dict(headers)))
    hold_tools = raw.get("hold_tools", [])
    if not isinstance(hold_tools, list) or not all(isinstance(t, str) for t in hold_tools):
        problems.append("mcp.gateway.hold_tools: a list of tool names")
    if not isinstance(raw.get("hold_destructive", False), bool):
        problems.append("mcp.gateway.hold_destructive: true or false")
    if problems:
        raise ConfigError(problems)
    return GatewayConfig(
        capability=capability,
        upstreams=tuple(upstreams),
        hold_tools=frozenset(hold_tools),
        hold_destructive=raw.get("hold_destructive", False),
    )
