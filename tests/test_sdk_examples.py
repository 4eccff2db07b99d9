"""Each adapter example runs its whole flow offline against the fake Review Queue."""

import importlib.util
import pathlib
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("langgraph_agent", "'amount': '100.00'"),
        ("openai_agents_agent", "Paid Acme Corp 100.00"),
        ("claude_agent", "ran {'command': 'ls /srv/old-reports'}"),
        ("bedrock_agent", "The payment was CONFIRMed."),
        ("agno_agent", "Paid Acme 100.00."),
        ("pydantic_ai_agent", "Paid Acme 100.00."),
        ("adk_agent", "Paid Acme 100.00."),
    ],
)
def test_it_runs_the_example_demo_to_completion(name, expected, capsys):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # typing.get_type_hints looks the module up by name
    spec.loader.exec_module(module)
    module.demo()
    out = capsys.readouterr().out
    assert "held:" in out
    assert "'status': 'completed'" in out
    assert expected in out
