"""An A2A agent served as the official a2a-sdk builds one, for the tests' agent executors."""

import httpx
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import BasePushNotificationSender, InMemoryPushNotificationConfigStore, InMemoryTaskStore
from a2a.types import AgentCapabilities, AgentCard, AgentInterface
from starlette.applications import Starlette


def a2a_app(executor, *, name: str, url: str, push_client: httpx.AsyncClient) -> Starlette:
    """`executor` behind its card (/.well-known/agent-card.json) and JSON-RPC at `url` (path /a2a), with
    in-memory tasks and push notifications sent with `push_client`."""
    card = AgentCard(
        name=name,
        description="pays invoices once a person approves",
        version="1",
        capabilities=AgentCapabilities(push_notifications=True),
        supported_interfaces=[AgentInterface(protocol_binding="JSONRPC", protocol_version="1.0", url=url)],
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
    )
    store = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=executor,
        task_store=InMemoryTaskStore(),
        agent_card=card,
        push_config_store=store,
        push_sender=BasePushNotificationSender(push_client, store),
    )
    return Starlette(
        routes=[*create_agent_card_routes(agent_card=card), *create_jsonrpc_routes(handler, rpc_url="/a2a")]
    )
