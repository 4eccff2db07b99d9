"""agentos.yaml's `mcp.gateway` section: the capability the gateway asks under and the upstream MCP servers.

```yaml
mcp:
  gateway:
    capability: mcp_gateway            # the capability its holds are asked under (declared above)
    upstreams:                         # name: streamable-HTTP URL, or {url, headers}
      files: http://127.0.0.1:9000/mcp
```
With one upstream, tools keep their names; with several, each is `<upstream>__<tool>`. Which calls wait
for a person is the capability's rules' to say (holds/mcp/gateway.py), not this section's.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..config import NAME, ConfigError

KEYS = {"capability", "upstreams"}
# Read before rules landed; a file that still has them is told where that policy went.
RETIRED = {"hold_tools", "hold_destructive"}


@dataclass(frozen=True)
class Upstream:
    name: str
    url: str
    headers: dict = field(default_factory=dict)


@dataclass(frozen=True)
class GatewayConfig:
    capability: str
    upstreams: tuple[Upstream, ...]


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
    problems += [
        f"mcp.gateway.{k}: no longer read: every call is asked, and the capability's rules decide"
        " (e.g. `when: run.input.annotations.readOnlyHint == true`, `then: approve`; docs/rules.md)"
        for k in sorted(RETIRED & set(raw))
    ]
    unknown = set(raw) - KEYS - RETIRED
    problems += [f"mcp.gateway.{k}: unknown key (known: {', '.join(sorted(KEYS))})" for k in sorted(unknown)]
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
    if problems:
        raise ConfigError(problems)
    return GatewayConfig(capability=capability, upstreams=tuple(upstreams))
