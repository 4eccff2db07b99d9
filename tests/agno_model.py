"""A scripted Agno model: no network, no provider. Agno ships no mock model, so this subclasses its
`Model` and answers each call from a script that reads the messages so far (ADAPTERS.md, Agno)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agno.models.base import Model
from agno.models.response import ModelResponse


def call(name: str, args: dict[str, Any], call_id: str) -> ModelResponse:
    function = {"name": name, "arguments": json.dumps(args)}
    return ModelResponse(role="assistant", tool_calls=[{"id": call_id, "type": "function", "function": function}])


def say(text: str) -> ModelResponse:
    return ModelResponse(role="assistant", content=text)


def tool_messages(messages: list[Any]) -> list[Any]:
    return [m for m in messages if m.role == "tool"]


class ScriptedModel(Model):
    def __init__(self, script: Callable[[list[Any]], ModelResponse]):
        super().__init__(id="scripted", name="Scripted", provider="offline")
        self.script = script

    def invoke(self, *args: Any, messages: list[Any] | None = None, **kwargs: Any) -> ModelResponse:
        return self.script(messages or [])

    async def ainvoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return self.invoke(*args, **kwargs)

    def invoke_stream(self, *args: Any, **kwargs: Any):
        yield self.invoke(*args, **kwargs)

    async def ainvoke_stream(self, *args: Any, **kwargs: Any):
        yield self.invoke(*args, **kwargs)

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
        return response

    def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
        return response
