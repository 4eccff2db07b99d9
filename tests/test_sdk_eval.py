"""agentos: `inv.eval` and `ask()` in an eval run (the service side is tests/test_evals_agent.py)."""

import agentos
from agentos.server import run_handler

RECORDED = {
    "experiment_id": "ex_3",
    "dataset_item_id": "di_9",
    "recorded_holds": [
        {
            "hold_id": "h_7",
            "ask": {"intent": "Pay", "items": [{"id": "INV-1", "title": "t", "data": {"amount": "1.00"}}]},
            "resume": {
                "hold_id": "h_7",
                "resolved_by": "human",
                "items": [{"id": "INV-1", "action": "edit", "data": {"amount": "2.00"}, "comment": "c"}],
                "comment": "c",
            },
        },
        {"ask": {"intent": "Never answered"}, "resume": None},
    ],
}


def invocation(eval_=None):
    body = {"id": "inv_1", "run_id": "r_1", "capability": "pay", "api_url": "http://127.0.0.1:9", "eval": eval_}
    return agentos.Invocation(body)


def test_eval_is_none_outside_experiments():
    assert invocation().eval is None


def test_eval_carries_the_recorded_holds_with_resumes_like_inv_resume():
    inv = invocation(RECORDED)
    assert (inv.eval.experiment_id, inv.eval.dataset_item_id) == ("ex_3", "di_9")
    first, second = inv.eval.recorded_holds
    assert type(first.resume) is agentos.Resume and first.hold_id == "h_7"
    assert first.resume.edited[0].data == {"amount": "2.00"} and first.ask["intent"] == "Pay"
    assert second.resume is None and second.ask == {"intent": "Never answered"}


def test_ask_in_an_eval_run_ends_the_invocation_even_without_suspending():
    def handler(inv):
        inv.ask("Pay", [{"id": "INV-1", "title": "t", "data": {}}], suspend=False)
        return {"went": "on"}

    assert run_handler(handler, invocation(RECORDED)) == {"status": "failed", "error": "asked_for_human"}


def test_a_handler_that_catches_the_signal_still_ends_asked_for_human():
    def handler(inv):
        try:
            inv.ask("Pay", [{"id": "INV-1", "title": "t", "data": {}}])
        except BaseException:  # noqa: BLE001 - a careless handler
            pass
        return {"went": "on"}

    assert run_handler(handler, invocation(RECORDED)) == {"status": "failed", "error": "asked_for_human"}
