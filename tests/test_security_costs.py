"""Issue 30: nothing an agent sends may cost anyone else time or room.

Each test names its finding (docs/security.md has the table: finding, fix, test). Tests of internals
(what is compiled, how often) are in tests/performance/test_hostile_costs.py.
"""

import pytest

from holds import item_schemas
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def live(cap):
    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    return run, invocation, token


def schema_item(n: int, schema: dict) -> dict:
    return {"id": f"INV-{n}", "title": f"Invoice {n}", "data": {"payee": "Acme"}, "schema": schema}


def pattern_schema(*patterns: str) -> dict:
    return {"type": "object", "properties": {f"p{i}": {"type": "string", "pattern": p} for i, p in enumerate(patterns)}}


def ask(api, token, *items):
    return api.post("/v0/holds", factories.ask_body(items=list(items)), token=token)


def fields(response) -> dict:
    return {e["field"]: e["message"] for e in response.json()["errors"]}


# --- 1. item schemas: bounded before compiling, refused past the bound ------------------------------


def test_1_a_pattern_too_costly_to_compile_is_refused_with_422(api, live):
    # `.{10000}` took 0.1-6 s to compile; the size limit refuses it while it compiles (about 1 ms).
    response = ask(api, live[2], schema_item(1, pattern_schema(".{10000}")))
    assert response.status_code == 422, response.content
    assert "compiled form is over" in fields(response)["items[0].schema"]


def test_1_an_ask_holds_at_most_32_patterns_and_no_pattern_over_1000_characters(api, cap):
    many = [f"^a{i}$" for i in range(item_schemas.MAX_PATTERNS + 1)]
    for items, field in (
        ([schema_item(1, pattern_schema(*many[:20])), schema_item(2, pattern_schema(*many[20:]))], "items"),
        ([schema_item(1, pattern_schema("a" * 1001))], "items[0].schema"),
        ([schema_item(1, {"patternProperties": {f"^k{i}$": {} for i in range(33)}})], "items"),
    ):
        _, token = factories.deliver_now(factories.start_run(cap))
        response = ask(api, token, *items)
        assert response.status_code == 422, response.content
        assert field in fields(response)


def test_1_an_asks_distinct_schemas_are_limited_to_256_kib_together(api, live):
    # Five schemas of ~60 KiB each (each under its own 64 KiB limit), all different.
    items = [schema_item(n, {"description": str(n) * 60_000}) for n in range(1, 6)]
    response = ask(api, live[2], *items)
    assert response.status_code == 422, response.content
    assert "256" in fields(response)["items"] or str(item_schemas.MAX_ASK_SCHEMA_BYTES) in fields(response)["items"]


def test_1_the_same_schema_on_every_item_counts_once(api, live):
    schema = pattern_schema(*[f"^b{i}$" for i in range(item_schemas.MAX_PATTERNS)])
    response = ask(api, live[2], *[schema_item(n, schema) for n in range(1, 51)])
    assert response.status_code == 201, response.content


def test_1_everyday_patterns_still_fit(api, live):
    everyday = [
        "^[A-Z]{2}-\\d{4}$",
        "^\\p{L}+$",
        "^[^@]+@[^@]+\\.[a-z]{2,}$",
        "^.{1,100}$",
        "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        "^\\w{1,64}$",
        "^[0-9]+\\.[0-9]{2}$",
    ]
    response = ask(api, live[2], schema_item(1, pattern_schema(*everyday)))
    assert response.status_code == 201, response.content


# --- 9. crafted paging cursors on the queue and history ---------------------------------------------


def cursor(values) -> str:
    import base64
    import json

    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


CRAFTED_QUEUE = [
    ["2026-13-45T99:00:00+00:00", 0, 0, None, "2026-01-01T00:00:00+00:00", 1],  # an impossible date
    ["2026-01-01T00:00:00+00:00", "x", 0, None, "2026-01-01T00:00:00+00:00", 1],  # a string for the bucket
    ["2026-01-01T00:00:00+00:00", 0, 0, None, None, 1],  # a null created_at
    ["2026-01-01T00:00:00+00:00", 0, 0, "2026-02-30T00:00:00+00:00", "2026-01-01T00:00:00+00:00", 1],
    ["2026-01-01T00:00:00+00:00", 0, 0, None, "2026-01-01T00:00:00+00:00", "1"],
]
CRAFTED_HISTORY = [
    ["2026-13-45T99:00:00+00:00", None, 1],
    [None, None, 1],
    ["2026-01-01T00:00:00+00:00", None, "1"],
    ["2026-01-01T00:00:00+00:00", None, 10**30],
]


def test_9_crafted_cursors_answer_400_on_the_queue_and_history(client, member, cap):
    client.raise_request_exception = False
    factories.held_hold(cap)
    client.force_login(member)
    for path, crafted in (("/", CRAFTED_QUEUE), ("/history", CRAFTED_HISTORY)):
        for values in crafted + [["too", "short"], "not a list"]:
            response = client.get(path, {"after": cursor(values)})
            assert response.status_code == 400, (path, values, response.status_code)
        for garbage in ("%%%", "x" * 2000, "bnVsbA"):
            assert client.get(path, {"after": garbage}).status_code == 400, (path, garbage)
        assert client.get(path, {"after": ""}).status_code == 200


# --- 2 and 8. markdown: one time budget for every text, children bounded on the host ---------------


def star_items(n=62) -> list[dict]:
    # Each item's details under its own 64 KiB limit and the old in-process limits (short, no brackets).
    return [{"id": f"S{i}", "title": "t", "data": {"a": 1}, "details": f"{i} " + "*a" * 2000} for i in range(n)]


@pytest.fixture
def slots(monkeypatch, tmp_path):
    """Markdown children of this test only (the host's slots are shared with whatever else runs)."""
    from holds import markup

    monkeypatch.setattr(markup, "SLOT_DIR", str(tmp_path / "slots"))
    monkeypatch.setattr(markup, "CHILD_SLOTS", 1)
    return markup


def test_2_the_time_budget_holds_for_many_short_texts_of_emphasis(slots):
    # 62 items of `*a` took 5.7-8.4 s in the web process; now they go to a child killed at the budget.
    texts = [item["details"] for item in star_items()]
    assert slots.render_all(texts, seconds=0.05) is None


def test_2_an_over_budget_ask_is_stored_and_shown_as_plain_text(api, live, slots, monkeypatch):
    monkeypatch.setattr(slots, "MAX_SECONDS", 0.05)
    monkeypatch.setattr(slots.render_all, "__defaults__", (0.05,))
    response = api.post("/v0/holds", factories.ask_body(items=star_items()), token=live[2])
    assert response.status_code == 201, response.content
    from holds.models import HoldItem

    assert set(HoldItem.objects.values_list("details_html", flat=True)) == {None}


def _most(build) -> list[str]:
    """build(n) for the largest n whose texts still render in process (the bounds only ever grow
    with n, so a binary search finds it)."""
    from holds import markup

    low, high = 0, markup.IN_PROCESS_CHARS
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if markup.in_process(build(mid)) else (low, mid - 1)
    return build(low)


def at_the_bounds(unit: str, *, sep: str = "", head: str = "") -> list[str]:
    """One text: `head`, then as many `unit`s (joined by `sep`) as the in-process bounds allow, then
    as many plain words as still fit, so that each unit has the most text after it to cost."""
    [text] = _most(lambda n: [head + sep.join([unit] * n)])
    return _most(lambda n: [text + " a" * n])


def line_by_line(line) -> list[str]:
    """One text of as many lines line(0), line(1)... as the in-process bounds allow, then as many
    plain words on the last line as still fit."""
    [text] = _most(lambda n: ["\n".join(line(i) for i in range(n))])
    return _most(lambda n: [text + " a" * n])


# Each aims at one way Python-Markdown, bleach or its linkifier costs more than linear time, and grows
# to whatever the in-process bounds let through: the bounds, not these sizes, decide how bad each is.
MARKDOWN_AT_THE_BOUNDS = {
    "emphasis": lambda: at_the_bounds("*a", sep=" "),
    "emphasis in one word": lambda: at_the_bounds("*a"),
    "underscores": lambda: at_the_bounds("_a", sep=" "),
    "strong and emphasis": lambda: at_the_bounds("***a", sep=" "),
    "brackets": lambda: at_the_bounds("["),
    "images": lambda: at_the_bounds("!["),
    "brackets each before a long text": lambda: at_the_bounds("[" + " a" * 120),
    "a link's parentheses": lambda: at_the_bounds("(", head="[a]("),
    "a link's title": lambda: at_the_bounds('"', head='[a](b "'),
    "parentheses": lambda: at_the_bounds("("),
    "backticks": lambda: at_the_bounds("`"),
    "code spans": lambda: at_the_bounds("`a", sep=" "),
    "angle brackets": lambda: at_the_bounds("<"),
    "autolinks": lambda: at_the_bounds("<http://a.co/", sep=" "),
    "ampersands": lambda: at_the_bounds("&"),
    "character references": lambda: at_the_bounds("&#1;"),
    "nested quotes": lambda: at_the_bounds(">"),
    "nested lists": lambda: at_the_bounds("- "),
    "nested numbered lists": lambda: at_the_bounds("1. "),
    "nested mixed lists": lambda: at_the_bounds("+ 1. * "),
    "indented lists": lambda: line_by_line(lambda i: "  " * i + "- a"),
    "deeply indented lists": lambda: line_by_line(lambda i: "    " * i + "- a"),
    "quotes on every line": lambda: line_by_line(lambda i: ">" * i + " a"),
    "a table": lambda: at_the_bounds("|a", head="|a|b\n|-|-\n"),
    "table rows": lambda: line_by_line(lambda i: f"|a|b|{i}"),
    "headings": lambda: line_by_line(lambda i: "# " + "a " * 30 + str(i)),
    "underlined headings": lambda: line_by_line(lambda i: f"a {i}\n==="),
    "fences": lambda: line_by_line(lambda i: f"```{i}"),
    "dashed words": lambda: at_the_bounds("-a"),
    "numbered dashed words": lambda: at_the_bounds("1-"),
    "web addresses": lambda: at_the_bounds("a.co", sep=" "),
    "e-mail addresses": lambda: at_the_bounds("a@b.co", sep=" "),
    "hidden characters": lambda: at_the_bounds("\u200b"),
    "spaced hidden characters": lambda: at_the_bounds("\u200b", sep=" "),
    "backslashes": lambda: at_the_bounds("\\"),
    "every markup character": lambda: at_the_bounds("*_[]`<>\\!~|()&", sep=" "),
    "a text a line": lambda: _most(lambda n: [f"t{i}" for i in range(n)]),
}


def test_2_the_worst_texts_within_the_in_process_bounds_render_within_the_budget(slots):
    """Markdown within the in-process bounds renders in the web process with no time limit of its
    own, so the bounds are its budget: every hostile text they let through must cost under 40 ms of
    the web process's CPU (docs/security.md, section 17, row 2), held here to half of that as a margin
    for slower machines. CPU time (time.process_time), not wall time: other load on the machine does
    not add to it; the least of three tries drops what noise remains."""
    import time

    budget = 0.040
    slots.render_all(["warm *up*"])  # the thread's converter and cleaner are built once
    costs, plain = {}, []
    for name, build in MARKDOWN_AT_THE_BOUNDS.items():
        texts = build()
        assert slots.in_process(texts), name
        tries = []
        for _ in range(3):
            slots.to_html.cache_clear()
            started = time.process_time()
            rendered = slots.render_all(texts)
            tries.append(time.process_time() - started)
        costs[name] = min(tries)
        if rendered is None:  # nothing within the bounds may nest deep enough to recurse
            plain.append(name)
    print("\n".join(f"{cpu * 1000:6.1f} ms  {name}" for name, cpu in sorted(costs.items(), key=lambda c: -c[1])))
    over = {name: round(cpu * 1000, 1) for name, cpu in costs.items() if cpu > budget / 2}
    assert not over and not plain, f"over {budget * 500:.0f} ms of CPU in process (ms): {over}; shown plain: {plain}"


def test_8_no_child_starts_past_the_hosts_slots(slots, monkeypatch):
    import fcntl
    import os

    os.makedirs(slots.SLOT_DIR)
    fd = os.open(os.path.join(slots.SLOT_DIR, "slot-0"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another ask's child holds the only slot
    started = []
    try:
        with monkeypatch.context() as patched:
            patched.setattr(slots.subprocess, "run", lambda *a, **k: started.append(a))
            assert slots.render_all(["[x](y) " * 700], seconds=0.2) is None
    finally:
        os.close(fd)
    assert started == []
    # The slot is free again: rendered (a generous budget: the machine may be loaded).
    assert slots.render_all(["[x](y) " * 700], seconds=30)[0].count("<a ") == 700


# --- 10. CSV cells are text whatever separator a spreadsheet splits on -------------------------------

SNEAKY_KEYS = ["x;=1+1;", "a,@SUM(1)", "b\t-2+3", "c| =cmd", "plain; text"]


def test_10_formula_like_pieces_are_quoted_whatever_the_separator(client, cap, member):
    import csv
    import io

    from holds import services
    from holds.auth import actor_for_account

    data = {key: 1 for key in SNEAKY_KEYS}
    body = factories.ask_body(items=[{"id": "I", "title": "t", "data": data, "confidence": dict.fromkeys(data, 0.2)}])
    hold = factories.held_hold(cap, body)[1]
    actor = actor_for_account(factories.account("csv-bot", role="member")[0])
    services.hold_decide(hold_id=hold.pk, actor=actor, body={"items": [{"id": "I", "action": "approve"}]})
    client.force_login(member)
    text = client.get("/calibration.csv").content.decode()
    for separator in (",", ";", "\t", "|"):
        # A spreadsheet that splits on `separator`, honouring double quotes as every reader does.
        for row in csv.reader(io.StringIO(text), delimiter=separator):
            for cell in row:
                assert not cell.lstrip(" ").startswith(("=", "+", "-", "@")), (separator, cell)
    # A naive reader that ignores quotes and splits each line on `;` still sees no formula.
    for line in text.splitlines():
        for cell in line.split(";"):
            assert not cell.strip(' "').startswith(("=", "+", "-", "@")), cell
    fields = {row[1] for row in csv.reader(io.StringIO(text))}
    assert "x;'=1+1;" in fields and "plain; text" in fields


# --- 12. claim and release cycles are rate-limited (each writes an audit row) ------------------------


@pytest.fixture
def fresh_limits(monkeypatch):
    from django.core.cache import cache

    from holds import ratelimit

    cache.clear()
    monkeypatch.setattr(ratelimit, "clock", lambda: 1_800_000_010.0)  # no window turns over mid-test
    yield
    cache.clear()


def test_12_claim_and_release_cycles_stop_at_the_claim_rate(client, cap, member, fresh_limits):
    from holds.models import AuditEvent

    hold = factories.held_hold(cap)[1]
    client.force_login(member)
    url = f"/holds/{hold.public_id}/claim"
    for _ in range(20):  # 40 audited changes asked for; the default rate is 30 an hour
        client.post(url)
        client.post(url, {"release": "1"})
    written = AuditEvent.objects.filter(hold_id_ref=hold.pk, kind__in=["hold.claimed", "hold.released"]).count()
    assert written == 30
    page = client.post(url, follow=True).content.decode()
    assert "Not claimed: too many claim requests" in page


# --- 13. one reminder per window, however often the hold is extended inside it ------------------------


def test_13_extending_inside_the_reminder_window_sends_no_new_reminder(cap, member, monkeypatch):
    import datetime as dt

    from django.utils import timezone

    from holds import notify_tasks, services
    from holds.auth import actor_for_user
    from holds.models import Hold, Notification

    sent = []
    monkeypatch.setattr(notify_tasks.notify, "delay", lambda *args: sent.append(args))
    remind = factories.capability(name="remind", remind_before=dt.timedelta(hours=6))
    hold = factories.held_hold(remind, factories.ask_body(expires_in=24 * 3600))[1]
    # Asked a day ago with a day to go: now 4 h left, inside the 6 h window.
    day_ago = timezone.now() - dt.timedelta(hours=20)
    Hold.objects.filter(pk=hold.pk).update(created_at=day_ago, expires_at=timezone.now() + dt.timedelta(hours=4))
    Notification.objects.bulk_create(
        Notification(hold=hold, kind=kind, channel=channel, sent_at=timezone.now())
        for kind in ("asked", "reminder")  # asked, and reminded when it fell under 6 h
        for channel in ("email", "webhook")
    )
    for hours in (4.5, 5, 5.5):  # three extensions, each still inside the 6 h window
        body = {"expires_in": int(hours * 3600), "reason": "a little more"}
        services.hold_extend(hold_id=hold.pk, actor=actor_for_user(member), body=body)
        notify_tasks.remind_due(now=timezone.now())
    assert sent == []
    # Extended past the window, it is reminded again when the new deadline comes within 6 h.
    services.hold_extend(hold_id=hold.pk, actor=actor_for_user(member), body={"expires_in": 86400, "reason": "more"})
    assert notify_tasks.remind_due(now=timezone.now()) == 0
    assert notify_tasks.remind_due(now=timezone.now() + dt.timedelta(hours=19)) == 1


# --- 14. approve by confidence: flagged details stay, titles show their marks, the server decides ----


def confident_items() -> list[dict]:
    return [
        {"id": "OK", "title": "Fine", "data": {"a": 1}, "confidence": {"a": 0.99}},
        {"id": "DET", "title": "Details", "data": {"a": 1}, "confidence": {"a": 0.99}, "details": "pay \u202eevil"},
        {"id": "RLO", "title": "Pay \u202eemAcme", "data": {"a": 1}, "confidence": {"a": 0.99}},
        {"id": "LOWC", "title": "Low", "data": {"a": 1}, "confidence": {"a": 0.2}},
    ]


def test_14_flagged_details_stay_undecided_and_titles_show_hidden_character_marks(client, cap, member):
    hold = factories.held_hold(cap, factories.ask_body(items=confident_items()))[1]
    client.force_login(member)
    html = client.post(f"/holds/{hold.public_id}/by-confidence", {"threshold": "0.9"}).content.decode()
    approved, stay = html.split("Stay undecided")
    assert "OK" in approved and "DET" not in approved and "DET" in stay
    assert "\u202e" not in html and "⟦U+202E⟧" in html
    assert 'data-approve="item-0"' in html and 'data-threshold="0.9"' in html


def test_14_the_server_recomputes_which_items_the_threshold_set(client, cap, member):
    import json

    from holds.models import AuditEvent

    hold = factories.held_hold(cap, factories.ask_body(items=confident_items()))[1]
    client.force_login(member)
    decision = {"items": [{"id": i["id"], "action": "approve"} for i in confident_items()]}
    # Crafted: every approved item named as set by the shortcut, to take them out of calibration.
    response = client.post(
        f"/holds/{hold.public_id}/decision",
        {
            "decision": json.dumps(decision),
            "fingerprint": hold.fingerprint,
            "by_confidence": "OK DET RLO LOWC",
            "by_confidence_threshold": "0.5",
        },
    )
    assert response.status_code == 303, response.content
    event = AuditEvent.objects.get(kind="hold.decided", hold_id_ref=hold.pk)
    assert event.data["by_confidence"] == ["OK"]  # the only item the shortcut approves at any threshold


# --- 4. quotas bound a run tree (child runs share their root's room) and a caller --------------------


def upload(client, token, content=b"0123456789"):
    headers = {"x-agentos-run-token": token, "x-filename": "f.txt"}
    return client.post("/v0/files", data=content, content_type="text/plain", headers=headers)


def child_token(api, cap, token) -> str:
    from holds.models import Run

    started = api.post("/v0/runs", {"capability": cap.name, "input": {}}, token=token)
    assert started.status_code in (200, 201, 202), started.content
    child = Run.objects.get(pk=int(started.json()["run_id"][2:]))
    return factories.deliver_now(child)[1]


def test_4_child_runs_share_their_roots_file_and_state_quotas(api, client, cap, live, settings):
    settings.RQ_RUN_MAX_FILES, settings.RQ_RUN_MAX_STATE_KEYS = 2, 2
    run, _, token = live
    assert upload(client, token).status_code == 201
    assert upload(client, token).status_code == 201
    assert upload(client, token).json()["quota"] == "files"
    child = child_token(api, cap, token)
    grandchild = child_token(api, cap, child)
    for t in (child, grandchild):
        refused = upload(client, t)
        assert refused.status_code == 409 and refused.json()["quota"] == "files"
    assert api.put(f"/v0/runs/{run.public_id}/state/a", 1, token=token).status_code == 204
    from holds.models import Run

    kid = Run.objects.get(parent=run)
    assert api.put(f"/v0/runs/{kid.public_id}/state/b", 1, token=child).status_code == 204
    refused = api.put(f"/v0/runs/{kid.public_id}/state/c", 1, token=child)
    assert refused.status_code == 409 and refused.json()["quota"] == "state_keys"


def test_4_one_caller_is_bounded_over_all_the_trees_it_starts(api, client, cap, member_key, settings):
    from holds.models import Run

    settings.RQ_CALLER_MAX_FILES, settings.RQ_CALLER_MAX_FILE_BYTES = 3, 10_000
    tokens = []
    for _ in range(2):
        started = api.post("/v0/runs", {"capability": cap.name, "input": {}}, key=member_key)
        tokens.append(factories.deliver_now(Run.objects.get(pk=int(started.json()["run_id"][2:])))[1])
    assert [upload(client, t).status_code for t in (tokens[0], tokens[0], tokens[1])] == [201, 201, 201]
    refused = upload(client, tokens[1])
    assert refused.status_code == 409 and refused.json()["quota"] == "caller_files"
    # Another caller's runs have their own room.
    other = factories.deliver_now(factories.start_run(cap))[1]
    assert upload(client, other).status_code == 201


# --- 3. experiments count every run they start, at both doors; datasets are bounded ---------------------


def new_dataset(api, cap, key, items: int) -> str:
    dataset = api.post("/v0/datasets", {"name": "hostile", "capability": cap.name}, key=key).json()["dataset_id"]
    for n in range(items):
        assert api.post(f"/v0/datasets/{dataset}/items", {"input": {"n": n}}, key=key).status_code == 201
    return dataset


def test_3_every_run_an_experiment_starts_counts_and_both_doors_answer_429(
    api, client, cap, member, settings, fresh_limits
):
    from holds.models import Run

    settings.RQ_RATE_EXPERIMENT_RUNS = "12/h"
    _, key = factories.account("lab", role="member")
    dataset = new_dataset(api, cap, key, 5)
    assert api.post("/v0/experiments", {"dataset": dataset}, key=key).status_code == 201
    assert api.post("/v0/experiments", {"dataset": dataset}, key=key).status_code == 201
    refused = api.post("/v0/experiments", {"dataset": dataset}, key=key)  # 15 runs > 12
    assert refused.status_code == 429 and refused.json()["error"] == "rate_limited"
    assert Run.objects.filter(experiment__isnull=False).count() == 10
    # The page's door: its own caller's budget, the same 429.
    client.force_login(member)
    for expected in (303, 303, 429):
        response = client.post(f"/datasets/{dataset}/experiments")
        assert response.status_code == expected, response.content
    assert response["Retry-After"] and Run.objects.filter(experiment__isnull=False).count() == 20


def test_3_the_pages_experiments_count_against_the_run_start_rate(client, api, cap, member, settings, fresh_limits):
    settings.RQ_RATE_RUN_START = "2/m"
    _, key = factories.account("lab", role="member")
    dataset = new_dataset(api, cap, key, 1)
    client.force_login(member)
    assert [client.post(f"/datasets/{dataset}/experiments").status_code for _ in range(3)] == [303, 303, 429]


def test_3_adding_dataset_items_is_rate_limited_and_datasets_have_a_size(api, cap, settings, fresh_limits):
    settings.RQ_DATASET_MAX_ITEMS = 3
    _, key = factories.account("lab", role="member")
    dataset = new_dataset(api, cap, key, 3)
    full = api.post(f"/v0/datasets/{dataset}/items", {"input": {}}, key=key)
    assert full.status_code == 409 and full.json()["quota"] == "dataset_items"
    settings.RQ_DATASET_MAX_ITEMS, settings.RQ_RATE_DATASET = 1000, "5/h"
    added = [api.post(f"/v0/datasets/{dataset}/items", {"input": {}}, key=key).status_code for _ in range(3)]
    assert added == [201, 429, 429]  # 3 added and 1 refused for room count: 5 an hour


# --- 7. calibration: bounded fields per capability, a paged table ---------------------------------------


def test_7_one_hold_with_many_confidence_keys_cannot_bloat_calibration(client, cap, member):
    import datetime as dt

    from django.utils import timezone

    from holds import calibration, rollup, services
    from holds.auth import actor_for_account
    from holds.models import CalibrationTotal

    keys = [f"k{n:04d}" for n in range(400)]
    item = {"id": "I", "title": "t", "data": dict.fromkeys(keys, 1), "confidence": dict.fromkeys(keys, 0.95)}
    hold = factories.held_hold(cap, factories.ask_body(items=[item]))[1]
    actor = actor_for_account(factories.account("bloat", role="member")[0])
    services.hold_decide(hold_id=hold.pk, actor=actor, body={"items": [{"id": "I", "action": "approve"}]})
    client.force_login(member)
    page = client.get("/calibration").content.decode()
    assert page.count("<tr") <= 1 + 50 and 'rel="next"' in page  # a header row and one page of fields
    last = client.get("/calibration", {"page": "2"}).content.decode()
    assert "(other fields)" in page + last and 'rel="prev"' in last and 'rel="next"' not in last
    assert client.get("/calibration", {"page": "x"}).status_code == 200
    # Sealed for good: still bounded.
    later = timezone.now() + dt.timedelta(hours=3)
    while rollup.rollup(now=later):
        pass
    fields = set(CalibrationTotal.objects.filter(capability=cap).values_list("field", flat=True))
    assert len(fields) == calibration.MAX_FIELDS and calibration.OTHER_FIELDS in fields


# --- 6. the experiment page: paged, capped, large values collapsed --------------------------------------


def test_6_large_expected_outputs_are_collapsed_and_items_paged(api, client, cap, member):
    from django.db import transaction

    from holds.auth import SYSTEM
    from holds.models import Experiment, Run
    from holds.services.runs import finish_run

    _, key = factories.account("lab", role="member")
    dataset = api.post("/v0/datasets", {"name": "big", "capability": cap.name}, key=key).json()["dataset_id"]
    huge = {"blob": "x" * (1024 * 1024)}  # 1 MiB
    for n in range(25):
        body = {"input": {"n": n}, "expected_output": huge if n < 5 else {"n": n}}
        assert api.post(f"/v0/datasets/{dataset}/items", body, key=key).status_code == 201
    assert api.post("/v0/experiments", {"dataset": dataset}, key=key).status_code == 201
    experiment = Experiment.objects.get()
    for run in Run.objects.filter(experiment=experiment).order_by("dataset_item_id"):
        output = {"n": run.input["n"]} if run.input["n"] % 2 else {"blob": "y" * (1024 * 1024)}
        with transaction.atomic():
            finish_run(run, status=Run.Status.COMPLETED, actor=SYSTEM, output=output)
    client.force_login(member)
    page = client.get(f"/experiments/{experiment.public_id}")
    assert page.status_code == 200
    html = page.content.decode()
    assert len(page.content) < 1024 * 1024  # five 1 MiB values and their diffs made 35.6 MB
    assert html.count('<li class="experiment-item') == 20 and 'rel="next"' in html
    assert "Too large to compare here" in html and "cut" in html
    # Totals count every item, not only the page's: the 10 odd n from 5 on match; the other 15 do not.
    this_one = html.split("This one")[1].split("</tr>")[0]
    assert this_one.endswith('<td class="num">10</td><td class="num">15</td>'), this_one
    rest = client.get(f"/experiments/{experiment.public_id}", {"page": "2"}).content.decode()
    assert rest.count('<li class="experiment-item') == 5 and 'rel="prev"' in rest


# --- Done when: a hostile ask costs a sign-in beside it no more than 100 ms of the server's time ----------


def _big_schemas(n: int) -> list[dict]:
    """Distinct schemas of about MAX_ASK_SCHEMA_BYTES together (each under the item's 64 KiB)."""
    from holds.canonical import canonical_json

    schemas = []
    for s in range(4):
        schema = {"type": "object", "properties": {}}
        while len(canonical_json(schema)) < item_schemas.MAX_ASK_SCHEMA_BYTES // 4 - 100:
            schema["properties"][f"p{n}_{s}_{len(schema['properties'])}"] = {"type": "string", "maxLength": 100}
        schemas.append(schema)
    return schemas


def _many_keys(n: int) -> list[dict]:
    keys = [f"k{n}_{k:05d}" for k in range(20_000)]
    return [{"id": "I", "title": "t", "data": dict.fromkeys(keys, 1), "confidence": dict.fromkeys(keys, 0.5)}]


# Issue 30's hostile asks, each made new for every request (nothing is served from a cache): (name, the
# answer it gets, its items). Markdown past the in-process bounds renders in a child; schemas past
# their bounds are refused before anything compiles (422); the rest is the most the bounds allow.
HOSTILE_ASKS = [
    ("62 items of emphasis", 201, lambda n: [dict(item, id=f"{item['id']}-{n}") for item in star_items()]),
    (
        "a markdown bomb: 240 KB of brackets and nested lists",
        201,
        lambda n: [
            {"id": f"B{i}", "title": "t", "data": {"a": n}, "details": "[" * 30_000 + "\n" + "- " * 15_000}
            for i in range(4)
        ],
    ),
    (
        "patterns too costly to compile",
        422,
        lambda n: [schema_item(1, pattern_schema(f".{{10000}}{n}", ".{100}{100}", "\\w{1000}"))],
    ),
    ("a hundred patterns", 422, lambda n: [schema_item(1, pattern_schema(*(f"^a{n}_{i}$" for i in range(100))))]),
    (
        "32 patterns, the most, each as costly as compiles",
        201,
        lambda n: [schema_item(1, pattern_schema(*(f"(?i)[a-z]{{1,500}}{n}_{i}" for i in range(32))))],
    ),
    ("256 KiB of schemas, the most", 201, lambda n: [schema_item(i, s) for i, s in enumerate(_big_schemas(n))]),
    ("20,000 confidence keys", 201, _many_keys),
]


# Serial: the measure is the server's time, and on 2 cores another test process beside this one
# stretches every wait for the GIL and the CPU. In the parallel phase a 20,000-key ask once delayed a
# sign-in by 103 ms in each of its three rounds, where alone it took 45-57 ms (since cut to 30-45 ms).
@pytest.mark.serial
@pytest.mark.django_db(transaction=True)
def test_done_when_a_hostile_ask_costs_a_sign_in_beside_it_under_100_ms_of_server_time(cap, settings, slots):
    """Measured in this process, where the Django test client runs each request's whole server side
    (the WSGI handler, the views, the database calls), on threads as a threaded server would.

    Two measures, robust to load from elsewhere that comes and goes:
    - each hostile ask's CPU time in the web process (time.thread_time of its thread): what it takes
      from every other request of the process (the GIL, a core). CPU time does not grow when other
      processes load the machine, so this holds under load; before the fixes it was seconds. This is
      the test's first measure: at most 100 ms for every ask of every kind.
    - sign-ins beside the hostile asks against sign-ins alone, taken in turns (one round beside, the
      same number alone, and again), so that load from elsewhere falls on both alike: the median and
      the slowest beside may each be at most 100 ms over the median and the slowest alone. The
      slowest, not the fastest: a stall that hits some sign-ins shows there.
    Markdown past the in-process bounds renders in a child process (bounded per host, killed at the
    budget): its CPU is not the web process's, and on 2 cores it runs beside the sign-in.
    """
    import json
    import statistics
    import threading
    import time

    from django.test import Client

    from holds.models import Hold

    settings.RQ_RATE_ASK = settings.RQ_RATE_LOGIN = "off"
    factories.person("signer", password="pw-for-tests-1")
    asks = [  # every kind three times, each beside sign-ins
        (name, status, json.dumps(factories.ask_body(items=items(n))).encode())
        for n in range(3 * len(HOSTILE_ASKS))
        for name, status, items in [HOSTILE_ASKS[n % len(HOSTILE_ASKS)]]
    ]
    tokens = [factories.deliver_now(factories.start_run(cap))[1] for _ in asks]

    def sign_in() -> float:
        client = Client()
        started = time.perf_counter()
        response = client.post("/login/", {"username": "signer", "password": "pw-for-tests-1"})
        took = time.perf_counter() - started
        assert response.status_code == 302, response.content[:200]
        return took

    sign_in()  # the first request of a process builds what every later one reuses
    costs, stop = [], threading.Event()
    go, started, done = threading.Semaphore(0), threading.Semaphore(0), threading.Semaphore(0)

    def hostile():
        from django.db import connection

        client = Client()
        try:
            for (name, expected, body), token in zip(asks, tokens, strict=True):
                go.acquire()  # one ask a round
                if stop.is_set():
                    break
                started.release()
                cpu = time.thread_time()
                response = client.post(
                    "/v0/holds", data=body, content_type="application/json", headers={"x-agentos-run-token": token}
                )
                costs.append((name, time.thread_time() - cpu, response.status_code, expected))
                done.release()
        finally:
            started.release()
            done.release()
            connection.close()

    rounds = []  # (the ask's kind, sign-ins beside it, as many alone at once after)
    thread = threading.Thread(target=hostile)
    thread.start()
    try:
        for name, _, _ in asks:
            go.release()
            assert started.acquire(timeout=30)
            beside = [sign_in()]
            while not done.acquire(blocking=False):  # beside the whole ask
                beside.append(sign_in())
            rounds.append((name, beside, [sign_in() for _ in beside]))
    finally:
        stop.set()
        go.release()
        thread.join(120)

    print()
    for name, cpu, status, _ in costs:
        print(f"{cpu * 1000:6.1f} ms of web-process CPU, {status}: {name}")
    for name, beside, alone in rounds:
        ms = [[round(t * 1000) for t in these] for these in (beside, alone)]
        print(f"sign-ins (ms) beside {ms[0]}, alone {ms[1]}: {name}")
    assert {name for name, *_ in costs} == {name for name, *_ in HOSTILE_ASKS}
    assert [status for *_, status, expected in costs] == [expected for *_, expected in costs]
    worst = max(costs, key=lambda c: c[1])
    assert worst[1] < 0.1, f"{worst[0]} took {worst[1] * 1000:.0f} ms of the web process's CPU"
    # A stall that a kind of ask causes comes back each time it runs; load from elsewhere does not
    # pick the same kind's rounds: so each kind's excess is the least over its three rounds.
    excess = {}
    for name, beside, alone in rounds:
        excess[name] = min(excess.get(name, 1e9), max(beside) - max(alone))
    stalls = {name: round(e * 1000) for name, e in excess.items() if e >= 0.1}
    assert not stalls, f"the slowest sign-in beside these asks took more than 100 ms over alone (ms): {stalls}"
    beside_all = [t for _, beside, _ in rounds for t in beside]
    alone_all = [t for _, _, alone in rounds for t in alone]
    median = statistics.median(beside_all) - statistics.median(alone_all)
    assert median < 0.1, f"beside hostile asks, the median sign-in took {median * 1000:.0f} ms more"
    assert Hold.objects.count() == sum(1 for _, _, status, _ in costs if status == 201)
