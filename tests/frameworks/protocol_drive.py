"""A capability of another agent protocol (AG-UI, A2A), its runs started, read and decided over the API."""

import uuid

import httpx

from holds.models import Invocation
from tests import factories
from tests.processes import wait_until


class ProtocolDrive:
    """Subclasses name the `protocol`, the runs' `input` and how long a run may take to move on."""

    protocol: str
    input: dict
    settle_seconds: float

    def __init__(self, url: str, agent):
        self.name = f"{self.protocol.replace('-', '')}_{uuid.uuid4().hex[:8]}"
        factories.capability(name=self.name, endpoint=agent.url, protocol=self.protocol, timeout_seconds=20.0)
        key = factories.account(f"bot-{self.name}", role="member")[1]
        self.api = httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=30)

    def start(self) -> str:
        response = self.api.post("/v0/runs", json={"capability": self.name, "input": self.input})
        assert response.status_code == 201, response.text
        return response.json()["run_id"]

    def run(self, run_id):
        return self.api.get(f"/v0/runs/{run_id}").json()

    def settled(self, run_id, statuses=("held", "completed", "failed")):
        try:
            return wait_until(
                lambda: (r := self.run(run_id))["status"] in statuses and r, self.settle_seconds, "the run to move on"
            )
        except AssertionError:
            raise AssertionError(list(Invocation.objects.values_list("status", "last_error", "answer"))) from None

    def hold(self, run_id) -> dict:
        run = self.settled(run_id)
        assert run["status"] == "held", run
        return self.api.get(f"/v0/holds/{run['holds'][-1]['hold_id']}").json()

    def decide(self, hold, items, comment=None):
        response = self.api.post(f"/v0/holds/{hold['hold_id']}/decision", json={"items": items, "comment": comment})
        assert response.status_code == 200, response.text
