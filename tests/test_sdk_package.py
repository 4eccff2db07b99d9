"""What the agentos package ships besides its modules."""

import importlib.resources
import tomllib
from pathlib import Path

SDK = Path(__file__).resolve().parent.parent / "sdk"


def test_the_installed_package_is_typed_and_its_build_ships_the_marker():
    # PEP 561: type checkers use the package's own hints only where py.typed is installed beside them.
    assert importlib.resources.files("agentos").joinpath("py.typed").is_file()
    # The wheel holds what package-data lists (a module-only build would leave the marker out).
    project = tomllib.loads((SDK / "pyproject.toml").read_text())
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["agentos"]
    assert (SDK / "agentos" / "py.typed").is_file()
