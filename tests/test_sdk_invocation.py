"""Invocation against a fake Review Queue: ask, resume, once, run state, files, child runs."""

import importlib.util
import pathlib

import agentos
import pytest
from agentos.testing import FakeReviewQueue

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def load_example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def rq():
    with FakeReviewQueue() as fake:
        yield fake


@pytest.fixture
def agent(rq):
    servers = []

    def start(handlers):
        server = agentos.Server(handlers, port=0, secret=rq.secret).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def run(rq, agent, handler, input=None):
    """Start a run of a single handler; returns its run id."""
    server = agent({"cap": handler})
    return rq.start_run("cap", input or {}, endpoint=server.url)


def test_it_runs_the_pay_invoices_flow_with_an_edit(rq, agent):
    example = load_example("pay_invoices")
    server = agent(example.HANDLERS)
    run_id = rq.start_run("pay_invoices", {}, endpoint=server.url)
    hold = rq.open_hold(run_id)
    assert rq.runs[run_id]["status"] == "held"
    assert [i["id"] for i in hold["items"]] == ["INV-1", "INV-2", "INV-3"]
    assert hold["actions"] == ["approve", "edit", "reject"]
    assert hold["items"][0]["confidence"] == {"amount": 0.68}
    assert rq.runs[run_id]["state"]["progress"] == {"step": "asked", "invoices": 3}
    assert example.PAYMENTS == []  # nothing is paid before a person decides

    answer = rq.decide(
        hold["hold_id"],
        [
            {
                "id": "INV-1",
                "action": "edit",
                "data": {"payee": "Aksa Lojistik A.Ş.", "amount": "18400.00"},
            },
            {"id": "INV-2", "action": "approve"},
            {"id": "INV-3", "action": "reject"},
        ],
        comment="paid last week",
    )
    assert answer["status"] == "completed"
    out = answer["output"]
    assert [(p["id"], p["payee"], p["amount"]) for p in out["paid"]] == [
        ("INV-1", "Aksa Lojistik A.Ş.", "18400.00"),
        ("INV-2", "Acme", "120.00"),
    ]
    assert out["rejected"] == ["INV-3"]
    assert [p["payee"] for p in example.PAYMENTS] == ["Aksa Lojistik A.Ş.", "Acme"]

    # The same decision delivered again (a re-run after a crash) pays nobody twice.
    again = rq.deliver(run_id, rq.holds[hold["hold_id"]]["resume"])
    assert again["output"]["paid"] == out["paid"]
    assert len(example.PAYMENTS) == 2


def test_it_gives_the_resume_as_decided(rq, agent):
    seen = {}

    def handler(inv):
        if inv.resume is None:
            inv.ask(
                "Check",
                [{"id": k, "title": k, "data": {"v": k}} for k in "abcd"],
                actions=["approve", "edit", "reject", "feedback"],
            )
        r = inv.resume
        seen.update(
            hold_id=r.hold_id,
            resolved_by=r.resolved_by,
            comment=r.comment,
            expired=r.expired,
            approved=[(i.id, i.data) for i in r.approved],
            edited=[i.id for i in r.edited],
            rejected=[(i.id, i.comment) for i in r.rejected],
            feedback=[(i.id, i.comment) for i in r.feedback],
            all=[i.action for i in r.decided_items],
            b=r.item("b").data,
        )
        with pytest.raises(KeyError):
            r.item("zzz")
        return "done"

    run_id = run(rq, agent, handler)
    hold_id = rq.open_hold(run_id)["hold_id"]
    rq.decide(
        hold_id,
        [
            {"id": "a", "action": "approve"},
            {"id": "b", "action": "edit", "data": {"v": "B"}},
            {"id": "c", "action": "reject", "comment": "own words"},
            {"id": "d", "action": "feedback"},
        ],
        comment="box",
    )
    assert seen == {
        "hold_id": hold_id,
        "resolved_by": "human",
        "comment": "box",
        "expired": False,
        "approved": [("a", {"v": "a"}), ("b", {"v": "B"})],
        "edited": ["b"],
        "rejected": [("c", "own words")],
        "feedback": [("d", "box")],
        "all": ["approve", "edit", "reject", "feedback"],
        "b": {"v": "B"},
    }


def test_it_tells_an_expired_resume(rq, agent):
    def handler(inv):
        if inv.resume is None:
            inv.ask("Check", [{"id": "a", "title": "a", "data": {}}], expires_in=60)
        return {"expired": inv.resume.expired, "items": len(inv.resume.decided_items)}

    run_id = run(rq, agent, handler)
    answer = rq.expire(rq.open_hold(run_id)["hold_id"])
    assert answer["output"] == {"expired": True, "items": 0}


def test_it_suspends_on_the_open_hold_when_a_rerun_asks_again(rq, agent):
    calls = []

    def handler(inv):
        calls.append(inv.id)
        inv.ask("Pay", [{"id": "a", "title": "a", "data": {}}])

    run_id = run(rq, agent, handler)
    hold_id = rq.open_hold(run_id)["hold_id"]
    again = rq.deliver(run_id)  # a new start invocation of the same run, as after a crash
    assert again == {"status": "suspended", "hold_id": hold_id}
    assert len(rq.runs[run_id]["holds"]) == 1
    assert len(calls) == 2


def test_it_returns_the_hold_id_without_suspending_when_asked_to(rq, agent):
    after = []

    def handler(inv):
        hold_id = inv.ask("Pay", [{"id": "a", "title": "a", "data": {}}], suspend=False)
        after.append(hold_id)  # the handler goes on to finish its work
        return "ignored: the invocation still suspends on its hold"

    run_id = run(rq, agent, handler)
    hold_id = rq.open_hold(run_id)["hold_id"]
    assert after == [hold_id]
    assert rq.answers[-1] == {"status": "suspended", "hold_id": hold_id}


def test_it_raises_ask_invalid_with_every_field_error(rq, agent):
    caught = []

    def handler(inv):
        try:
            inv.ask(
                "",
                [{"id": "a", "title": "", "data": {"x": 1}, "confidence": {"y": 2}}],
                actions=["approve", "approve"],
                expires_in=5,
            )
        except agentos.AskInvalid as exc:
            caught.append(exc)
            raise

    run_id = run(rq, agent, handler)
    fields = {e["field"] for e in caught[0].errors}
    assert fields == {"intent", "items[0].title", "items[0].confidence.y", "actions", "expires_in"}
    assert caught[0].status == 422
    assert rq.runs[run_id]["status"] == "failed"
    assert "items[0].confidence.y" in rq.runs[run_id]["error"]


def test_it_runs_a_once_step_only_once_per_run(rq, agent):
    effects = []

    def handler(inv):
        first = inv.once("charge", lambda: effects.append(inv.id) or {"charged": len(effects)})
        nothing = inv.once("noop", lambda: effects.append("noop"))
        if inv.resume is None:
            inv.ask("Go on?", [{"id": "a", "title": "a", "data": {}}])
        return {"first": first, "nothing": nothing}

    run_id = run(rq, agent, handler)
    answer = rq.decide(rq.open_hold(run_id)["hold_id"], [{"id": "a", "action": "approve"}])
    assert answer["output"] == {"first": {"charged": 1}, "nothing": None}
    assert len(effects) == 2  # one charge and one noop across both invocations
    assert rq.runs[run_id]["state"]["once:charge"] == {"result": {"charged": 1}}


def test_it_keeps_run_state_between_invocations(rq, agent):
    def handler(inv):
        s = inv.state.run
        if inv.resume is None:
            s.put("progress", {"step": 1, "list": [1, "two", None]})
            s.put("gone", True)
            s.delete("gone")
            s.delete("never-there")
            inv.ask("Go on?", [{"id": "a", "title": "a", "data": {}}])
        with pytest.raises(KeyError):
            s.get("gone")
        return {
            "progress": s.get("progress"),
            "default": s.get("gone", "dflt"),
            "odd key": s.get("a/b c", 0),
        }

    run_id = run(rq, agent, handler)
    answer = rq.decide(rq.open_hold(run_id)["hold_id"], [{"id": "a", "action": "approve"}])
    assert answer["output"] == {
        "progress": {"step": 1, "list": [1, "two", None]},
        "default": "dflt",
        "odd key": 0,
    }


def test_it_uploads_files_and_attaches_them_to_an_ask(rq, agent, tmp_path):
    pdf = tmp_path / "invoice-1.pdf"
    pdf.write_bytes(b"%PDF-1.4 fake")

    def handler(inv):
        a = inv.files.upload(pdf)
        b = inv.files.upload(b"col\n1\n", name="rows.csv", content_type="text/csv")
        inv.ask("Look", [{"id": "a", "title": "a", "data": {}}], files=[a, b])

    run_id = run(rq, agent, handler)
    hold = rq.open_hold(run_id)
    a, b = (rq.files[f] for f in hold["files"])
    assert (a["name"], a["content_type"], a["content"]) == (
        "invoice-1.pdf",
        "application/pdf",
        b"%PDF-1.4 fake",
    )
    assert (b["name"], b["content_type"], b["content"]) == ("rows.csv", "text/csv", b"col\n1\n")


def test_it_starts_each_child_run_once_per_run(rq, agent):
    def handler(inv):
        explicit = inv.start_child("ship", {"order": 1}, idempotency_key=inv.idempotency_key("s"))
        derived = inv.start_child("ship", {"order": 2})
        if inv.resume is None:
            inv.ask("Go on?", [{"id": "a", "title": "a", "data": {}}])
        return [explicit, derived]

    run_id = run(rq, agent, handler)
    answer = rq.decide(rq.open_hold(run_id)["hold_id"], [{"id": "a", "action": "approve"}])
    assert answer["output"] == rq.runs[run_id]["children"]
    assert len(rq.runs[run_id]["children"]) == 2
    assert rq.runs[answer["output"][1]]["input"] == {"order": 2}


def test_it_raises_api_error_when_the_token_is_refused(rq, agent):
    def handler(inv):
        inv.run_token = "tok_wrong"
        inv._api._client.headers["x-agentos-run-token"] = "tok_wrong"
        inv.state.run.get("x", None)

    run_id = run(rq, agent, handler)
    assert rq.runs[run_id]["status"] == "failed"
    assert "401" in rq.runs[run_id]["error"]
