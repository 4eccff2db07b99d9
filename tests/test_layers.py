"""Every module of holds/ sits in a layer of the import-linter contract (pyproject.toml), so that
`lint-imports` checks what each may import; a new module without a layer fails here."""

import pkgutil
import re
import tomllib
from pathlib import Path

import holds

ROOT = Path(__file__).resolve().parent.parent


def layered_modules() -> set[str]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    named = set()
    for contract in contracts:
        if contract["type"] == "layers":
            for layer in contract["layers"]:
                named.update(name.strip() for name in re.split(r"[:|]", layer))
    return named


def test_every_module_of_holds_is_in_a_layer():
    modules = {f"holds.{info.name}" for info in pkgutil.iter_modules(holds.__path__)}
    assert len(modules) > 40
    assert sorted(modules - layered_modules()) == []
    assert sorted(m for m in layered_modules() if m.startswith("holds.") and m not in modules) == []


def test_only_the_benchmarks_take_the_drivers_own_cursor():
    """Statements reach PostgreSQL through the gateway (ruff bans `connection.cursor` elsewhere); its
    `driver_cursor` is for bench/'s seeder and bare baselines, and no product module uses it."""
    users = [
        path.relative_to(ROOT).as_posix()
        for folder in ("holds", "reviewqueue", "sdk")
        for path in (ROOT / folder).rglob("*.py")
        if "driver_cursor" in path.read_text()
    ]
    assert users == ["holds/services/gateway.py"]
    assert any("driver_cursor" in path.read_text() for path in (ROOT / "bench").glob("*.py"))
