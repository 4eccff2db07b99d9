"""Reading `agentos.yaml`: every capability checked in full before anything is written.

A bad file stops the sync with messages that name the capability and the key; nothing is
half-applied because the caller writes only after `load_capabilities` returned without errors.
"""

import base64
import json
import re
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import jsonschema
import yaml

from .models import Protocol, Role
from .rules import check_rules

KEYS = {
    "endpoint",
    "version",
    "input",
    "output",
    "timeout",
    "approvers",
    "secret",
    "notify",
    "self_approval",
    "remind_before",
    "confidence_default",
    "protocol",
    "rules",
    "quorum",
    "escalate",
}
NOTIFY_KEYS = {"email", "webhook", "slack", "push"}
DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
# remind_before spans what a hold may live (SPEC: expires_in is at most 30 days).
MAX_REMIND_BEFORE = 30 * 86400
# Without a capability's remind_before: the reminder's window before expiry, for holds that lived
# REMIND_MIN_LIFE (notifications.due).
REMIND_BEFORE = timedelta(hours=1)
REMIND_MIN_LIFE = timedelta(hours=2)
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


class ConfigError(Exception):
    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass
class CapabilitySpec:
    name: str
    values: dict = field(default_factory=dict)  # only the keys the file sets


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def parse_duration(value, *, most: float = 3600) -> float:
    if isinstance(value, bool):
        raise ValueError("a duration like 30s, 2m or 500ms")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = DURATION.match(str(value).strip())
        if not match:
            raise ValueError("a duration like 30s, 2m or 500ms")
        seconds = float(match.group(1)) * UNITS[match.group(2)]
    if not 0 < seconds <= most:
        raise ValueError("between 0 and 1h" if most == 3600 else f"between 0 and {most // 86400:g}d")
    return seconds


def load_capabilities(path: Path) -> list[CapabilitySpec]:
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML: {exc}"]) from None
    # `mcp` is the MCP gateway's section (holds/mcp/gateway_config.py), read by `manage.py mcp_gateway`.
    if (
        not isinstance(document, dict)
        or "capabilities" not in document
        or set(document) - {"capabilities", "mcp"}
        or not isinstance(document["capabilities"], dict)
    ):
        raise ConfigError(
            [f"{path}: the file must have the top-level key 'capabilities', mapping names to settings (and 'mcp')"]
        )
    problems, specs = [], []
    for name, raw in document["capabilities"].items():
        spec, errors = _capability(path.parent, str(name), raw)
        problems += [f"capability '{name}': {e}" for e in errors]
        specs.append(spec)
    if problems:
        raise ConfigError(problems)
    return specs


def _capability(base: Path, name: str, raw) -> tuple[CapabilitySpec, list[str]]:
    spec, errors = CapabilitySpec(name=name), []
    if not NAME.match(name):
        errors.append("the name may use letters, digits, '_', '.' and '-' (1-100 characters)")
    if not isinstance(raw, dict):
        return spec, errors + ["its settings must be a mapping"]
    for key in sorted(set(raw) - KEYS):
        errors.append(f"key '{key}': unknown key (known: {', '.join(sorted(KEYS))})")
    endpoint = raw.get("endpoint")
    if not isinstance(endpoint, str) or not re.match(r"^https?://[^\s/]+", endpoint or ""):
        errors.append("key 'endpoint': required, an http(s) URL")
    else:
        spec.values["endpoint"] = endpoint.rstrip("/")
    if "protocol" in raw:
        if raw["protocol"] not in Protocol.values:
            errors.append(f"key 'protocol': one of {', '.join(Protocol.values)}")
        else:
            spec.values["protocol"] = raw["protocol"]
    if "version" in raw:
        if not isinstance(raw["version"], (str, int)) or isinstance(raw["version"], bool):
            errors.append("key 'version': a string")
        else:
            spec.values["version"] = str(raw["version"])
    if "timeout" in raw:
        try:
            spec.values["timeout_seconds"] = parse_duration(raw["timeout"])
        except ValueError as exc:
            errors.append(f"key 'timeout': {exc}")
    if "remind_before" in raw:
        try:
            seconds = parse_duration(raw["remind_before"], most=MAX_REMIND_BEFORE)
            spec.values["remind_before"] = timedelta(seconds=seconds)
        except ValueError as exc:
            errors.append(f"key 'remind_before': {str(exc).replace('30s, 2m or 500ms', '30m, 4h or 2d')}")
    if "confidence_default" in raw:
        value = raw["confidence_default"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            errors.append("key 'confidence_default': a number from 0 to 1")
        else:
            spec.values["confidence_default"] = float(value)
    for key, target in (("input", "input_schema"), ("output", "output_schema")):
        if key in raw:
            try:
                spec.values[target] = _schema(base, raw[key])
            except ValueError as exc:
                errors.append(f"key '{key}': {exc}")
    if "approvers" in raw:
        approvers = raw["approvers"]
        if (
            not isinstance(approvers, list)
            or not approvers
            or any(a not in (Role.ADMIN, Role.MEMBER) for a in approvers)
        ):
            errors.append("key 'approvers': a non-empty list of roles from [admin, member]")
        else:
            spec.values["approvers"] = list(dict.fromkeys(approvers))
    if "self_approval" in raw:
        if not isinstance(raw["self_approval"], bool):
            errors.append("key 'self_approval': true or false")
        else:
            spec.values["self_approval"] = raw["self_approval"]
    if "secret" in raw:
        secret = raw["secret"]
        try:
            if not isinstance(secret, str) or not secret.startswith("whsec_"):
                raise ValueError
            if len(base64.b64decode(secret[6:], validate=True)) < 16:
                raise ValueError
            spec.values["secret"] = secret
        except ValueError:
            errors.append("key 'secret': 'whsec_' followed by base64 of at least 16 bytes")
    if "notify" in raw:
        notify = raw["notify"]
        if not isinstance(notify, dict) or set(notify) - NOTIFY_KEYS:
            errors.append(
                "key 'notify': a mapping with 'email' / 'push' (true/false), 'webhook' (a URL), 'slack' (a channel id)"
            )
        elif any(key in notify and not isinstance(notify[key], bool) for key in ("email", "push")):
            errors.append("key 'notify.email' and 'notify.push': true or false")
        elif "slack" in notify and not re.match(r"^[A-Z0-9]{2,40}$", str(notify["slack"])):
            errors.append("key 'notify.slack': a Slack channel id such as C0123456789")
        elif "webhook" in notify and not re.match(r"^https?://\S+$", str(notify["webhook"])):
            errors.append("key 'notify.webhook': an http(s) URL")
        else:
            spec.values["notify"] = notify
    if "quorum" in raw:
        quorum, problem = check_quorum(raw["quorum"])
        if problem:
            errors.append(f"key 'quorum': {problem}")
        else:
            spec.values["quorum"] = quorum
    if "escalate" in raw:
        steps, problem = check_escalate(raw["escalate"])
        if problem:
            errors.append(f"key 'escalate': {problem}")
        else:
            spec.values["escalate"] = steps
    if "rules" in raw:
        rules, problems = check_rules(raw["rules"])
        errors += [f"key 'rules': {problem}" for problem in problems]
        if not problems:
            spec.values["rules"] = [rule.as_json() for rule in rules]
    return spec, errors


def check_quorum(raw) -> tuple[dict | None, str | None]:
    """`{approvals: N, from: [roles]}` -> the stored form, or a problem. Whether N people may decide is
    asked when the capability is written (services/team.py), where the people are known."""
    if (
        isinstance(raw, dict)
        and set(raw) == {"approvals", "from"}
        and isinstance(raw["approvals"], int)
        and not isinstance(raw["approvals"], bool)
        and 1 <= raw["approvals"] <= 10
        and isinstance(raw["from"], list)
        and raw["from"]
        and all(role in (Role.ADMIN, Role.MEMBER) for role in raw["from"])
    ):
        return {"approvals": raw["approvals"], "from": list(dict.fromkeys(raw["from"]))}, None
    return None, "a mapping {approvals: N, from: [roles]} with N from 1 to 10 and roles from [admin, member]"


ESCALATE_SHAPE = (
    "a list of steps {after: 2h, notify: [roles or usernames]}, `after` growing from step to step; "
    "the last step may be {after: 8h, expire: true}"
)


def check_escalate(raw) -> tuple[list | None, str | None]:
    """`escalate:` -> [{"after": seconds, "notify": [...]} | {"after": seconds, "expire": true}], or a problem."""
    if not isinstance(raw, list) or not raw or len(raw) > 10:
        return None, ESCALATE_SHAPE
    steps = []
    for n, step in enumerate(raw):
        if not isinstance(step, dict) or "after" not in step:
            return None, ESCALATE_SHAPE
        try:
            after = parse_duration(step["after"], most=MAX_REMIND_BEFORE)
        except ValueError:
            return None, f"step {n + 1}: 'after' is a duration like 30m, 4h or 2d (at most 30d)"
        if steps and after <= steps[-1]["after"]:
            return None, f"step {n + 1}: 'after' must be later than the step before"
        if set(step) == {"after", "expire"} and step["expire"] is True and n == len(raw) - 1:
            steps.append({"after": after, "expire": True})
        elif (
            set(step) == {"after", "notify"}
            and isinstance(step["notify"], list)
            and step["notify"]
            and all(isinstance(who, str) and who for who in step["notify"])
        ):
            steps.append({"after": after, "notify": list(dict.fromkeys(step["notify"]))})
        else:
            return None, f"step {n + 1}: {ESCALATE_SHAPE}"
    return steps, None


def _schema(base: Path, ref) -> dict:
    if not isinstance(ref, str) or not ref:
        raise ValueError("a path to a JSON Schema file, relative to agentos.yaml")
    path = (base / ref).resolve()
    try:
        schema = json.loads(path.read_text())
    except OSError:
        raise ValueError(f"cannot read {ref}") from None
    except ValueError as exc:
        raise ValueError(f"{ref} is not valid JSON: {exc}") from None
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"{ref} is not a valid JSON Schema: {exc.message}") from None
    return schema
