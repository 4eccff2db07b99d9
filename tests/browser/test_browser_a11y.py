"""axe-core (pinned in package.json) finds 0 accessibility violations on the reviewer's pages."""

import pytest

from tests import factories
from tests.browser.conftest import AXE, screenshot
from tests.conftest import require

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def violations(page) -> list[str]:
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [
        f"{v['id']} ({v['impact']}): {v['help']} -> {[n['target'] for n in v['nodes']][:5]}"
        for v in result["violations"]
    ]


@pytest.fixture
def axe_session(person_session):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    # Only the test injects axe; the app's own CSP is tested with it on, elsewhere.
    return person_session("mona", bypass_csp=True)


def test_it_finds_no_accessibility_violations_on_queue_hold_and_history(axe_session, cap):
    _, hold = factories.held_hold(cap, factories.ask_body(n_items=3))
    _, decided = factories.held_hold(cap, factories.ask_body(intent="Pay Acme"))
    page = axe_session.page
    page.goto(f"/holds/{decided.public_id}")
    page.get_by_role("button", name="Approve all").click()
    page.get_by_role("button", name="Confirm decision").click()
    page.get_by_text("Decision recorded").wait_for()

    for url in ("/", f"/holds/{hold.public_id}", f"/holds/{decided.public_id}", "/history", "/history?q=nothing"):
        page.goto(url)
        assert violations(page) == [], url
        if url == "/history":
            screenshot(page, "history")

    page.goto(f"/holds/{hold.public_id}")
    page.get_by_role("group", name="Payee 1 · 100.00").get_by_label("Edit").check()
    page.get_by_role("button", name="Submit decision").click()  # items 2 and 3 have no action: errors shown
    page.locator("#comment").wait_for()
    page.get_by_text("Choose an action for this item.").first.wait_for()
    assert violations(page) == [], "hold page with errors"
    screenshot(page, "hold-errors")
    page.get_by_role("group", name="Payee 2 · 101.00").get_by_label("Reject").check()
    page.get_by_role("group", name="Payee 3 · 102.00").get_by_label("Approve").check()
    page.get_by_role("button", name="Submit decision").click()
    page.locator("#last-look[open]").wait_for()
    page.wait_for_timeout(300)
    screenshot(page, "last-look-reject", full_page=False)
    assert violations(page) == [], "last look"


def test_it_finds_no_accessibility_violations_on_the_ops_page(axe_session, cap):
    import datetime as dt

    from django.utils import timezone

    from holds.models import Capability

    factories.held_hold(cap, factories.ask_body(n_items=2, expires_in=1800))
    factories.capability(name="send_email")
    Capability.objects.filter(pk=cap.pk).update(endpoint_stalled_at=timezone.now() - dt.timedelta(minutes=4))
    Capability.objects.filter(name="send_email").update(endpoint_disabled_at=timezone.now())
    page = axe_session.page
    page.goto("/ops")
    page.get_by_role("heading", name="Stalled endpoints").wait_for()
    assert violations(page) == [], "/ops"
    screenshot(page, "ops")


def test_it_finds_no_accessibility_violations_on_the_sign_in_and_empty_queue(session_factory):
    require("axe-core: run `npm ci` (node_modules/axe-core/axe.min.js)", AXE.exists())
    factories.person("mona")
    session = session_factory(bypass_csp=True)
    page = session.page
    page.goto("/login/")
    assert violations(page) == []
    screenshot(page, "sign-in")
    session.sign_in("mona")
    assert violations(page) == []
    screenshot(page, "queue-empty")
    page.goto("/?q=nothing-matches")
    assert violations(page) == []


def _experiment_pages_data(cap):
    """A dataset of three items and two experiments on it: a match, a mismatch, an asked_for_human."""
    from holds import services
    from holds.auth import actor_for_account, run_token_for
    from holds.errors import Conflict

    actor = actor_for_account(factories.account("eval-bot", role="admin")[0])
    run, hold = factories.held_hold(cap)
    decision = {"items": [{"id": "INV-1", "action": "edit", "data": {"payee": "Payee One Ltd", "amount": "100.00"}}]}
    decision["items"].append({"id": "INV-2", "action": "reject"})
    services.hold_decide(hold_id=hold.pk, actor=actor, body={**decision, "comment": "duplicate"})
    invocation, _ = factories.deliver_now(run)
    factories.answer(invocation, {"status": "completed", "output": {"paid": ["INV-1"], "rejected": ["INV-2"]}})
    dataset = services.dataset_create(name="Invoices decided in May", capability_name=cap.name, actor=actor)
    services.dataset_item_from_run(dataset=dataset, run_pk=run.pk, actor=actor)
    for n in (2, 3):
        services.dataset_item_add(
            dataset=dataset, actor=actor, input={"n": n}, recorded_holds=[], expected_output={"paid": [f"INV-{n}"]}
        )
    outputs = [
        ({"paid": ["INV-1"], "rejected": ["INV-2"]}, {"paid": ["INV-2"]}, None),
        ({"paid": ["INV-1"], "rejected": ["INV-2"]}, {"paid": ["INV-2"], "note": "new"}, None),
    ]
    for answers in outputs:
        _, runs = services.experiment_start(dataset=dataset, actor=actor)
        for eval_run, output in zip(runs, answers, strict=True):
            invocation, token = factories.deliver_now(eval_run)
            if output is None:
                try:
                    services.eval_ask_refusal(token=run_token_for(invocation.id))
                except Conflict:
                    pass
            else:
                factories.answer(invocation, {"status": "completed", "output": output})
        services.experiments_finish()
    return dataset, hold


def test_it_finds_no_accessibility_violations_on_the_evals_pages(axe_session, cap):
    from holds.models import Experiment

    dataset, hold = _experiment_pages_data(cap)
    latest = Experiment.objects.order_by("-pk").first()
    page = axe_session.page
    for url, name in (
        ("/experiments", "experiments"),
        (f"/experiments/{latest.public_id}", "experiment"),
        (f"/datasets/{dataset.public_id}", "dataset"),
        (f"/holds/{hold.public_id}/dataset", "add-to-dataset"),
    ):
        page.goto(url)
        assert violations(page) == [], url
        screenshot(page, name)


def test_it_finds_no_accessibility_violations_on_the_out_of_office_page(axe_session, cap):
    factories.person("carol")
    page = axe_session.page
    page.get_by_role("link", name="Out of office").click()
    page.get_by_role("heading", name="Out of office", level=1).wait_for()
    assert violations(page) == [], "/away"
    page.get_by_role("button", name="Save out of office").click()  # no end, no delegate: errors shown
    page.locator("#away-until-error").wait_for()
    assert violations(page) == [], "/away with errors"
    page.get_by_label("Until").fill("2099-01-01T00:00")
    page.get_by_label("Who stands in").select_option("carol")
    page.get_by_role("button", name="Save out of office").click()
    page.get_by_text("carol stands in, acting for you").wait_for()
    assert violations(page) == [], "/away while away"
