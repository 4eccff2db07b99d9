"""Hidden characters: each class made visible and flagged in every place agent text is shown.

Classes: bidirectional controls (U+202A-U+202E, U+2066-U+2069), zero-width characters
(U+200B-U+200D, U+2060, U+FEFF) and mixed-script look-alikes (Latin with Cyrillic or Greek).
Places: intent, item title, item id, data keys, data values, details; on the hold page, in the
queue, the last look, and the history.
"""

import re

import pytest

from holds import services
from holds.auth import actor_for_user
from holds.rendering import mark_of
from tests import factories

pytestmark = pytest.mark.django_db

BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]
HIDDEN = BIDI + ZERO_WIDTH
# Latin text with one look-alike from another script: Cyrillic а (U+0430), Greek ο (U+03BF), Cyrillic р (U+0440).
LOOKALIKES = [("P\u0430yPal", "Cyrillic"), ("g\u03bfogle", "Greek"), ("\u0440aypal", "Cyrillic")]


def one_hidden_hold(cap, text: str):
    """Every agent-written place carries `text`."""
    body = factories.ask_body(
        intent=f"Pay {text} now",
        items=[
            {
                "id": f"INV{text}1",
                "title": f"Title {text}",
                "data": {f"iban{text}": f"DE89{text}3704", "plain": "ok"},
                "confidence": {f"iban{text}": 0.9},
            }
        ],
        details=f"Details {text} end",
    )
    return factories.held_hold(cap, body)[1]


def shown(html: str) -> str:
    """The page without its form values: an edit input holds the exact string, to send it back unchanged."""
    html = re.sub(r'value="[^"]*"', 'value=""', html)
    return re.sub(r"<textarea([^>]*)>.*?</textarea>", r"<textarea\1></textarea>", html, flags=re.S)


def element_text(html: str, css_class: str) -> list[str]:
    return re.findall(rf'class="{css_class}"[^>]*>(.*?)</', html, re.S)


@pytest.fixture
def signed_in(client, member):
    client.force_login(member)
    return client


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_it_marks_and_flags_each_hidden_character_in_every_field_of_the_hold_page(signed_in, cap, char):
    hold = one_hidden_hold(cap, char)
    html = signed_in.get(f"/holds/{hold.public_id}").content.decode()
    mark = mark_of(char)
    assert char not in shown(html)  # never shown raw, not even once
    # intent, title, id, key, value, details: each shows the mark, each is flagged.
    assert f"Pay {mark}" in html or "Pay <mark" in html
    for expected in ("Title ", "INV", "iban", "DE89", "Details "):
        pattern = re.escape(expected) + r"(<mark[^>]*>)?" + re.escape(mark)
        assert re.search(pattern, html), expected
    flags = re.findall(r'<span class="flag">([^<]*)</span>', html)
    assert flags.count("hidden characters") >= 4, flags  # intent, item, key row, value row, details
    assert html.count("hidden characters") >= 5


@pytest.mark.parametrize("char", HIDDEN, ids=[f"U+{ord(c):04X}" for c in HIDDEN])
def test_it_marks_and_flags_each_hidden_character_in_the_queue(signed_in, cap, char):
    one_hidden_hold(cap, char)
    html = signed_in.get("/").content.decode()
    assert char not in shown(html) and mark_of(char) in html and "hidden characters" in html


@pytest.mark.parametrize("char", HIDDEN[:1] + ZERO_WIDTH[:1])
def test_it_marks_hidden_characters_in_the_last_look(signed_in, cap, char):
    hold = one_hidden_hold(cap, char)
    response = signed_in.post(
        f"/holds/{hold.public_id}/review",
        {"fingerprint": hold.fingerprint, "approve_all": "1", "comment": f"ok{char}"},
        headers={"HX-Request": "true"},
    )
    html = response.content.decode()
    assert response.status_code == 200 and char not in shown(html)
    assert html.count(mark_of(char)) >= 4  # intent, title, id, comment


@pytest.mark.parametrize("text, script", LOOKALIKES)
def test_it_flags_mixed_script_look_alikes_in_every_field_of_the_hold_page(signed_in, cap, text, script):
    hold = one_hidden_hold(cap, text)
    html = signed_in.get(f"/holds/{hold.public_id}").content.decode()
    flag = f"mixed scripts: Latin with {script}"
    assert text in html  # look-alikes are shown as they are: the flag is the warning
    # The intent's flag, the item's flags (title, id), the key row and the value row, the details.
    assert html.count(flag) >= 4, html.count(flag)
    assert flag in "".join(element_text(html, "flags"))


def test_it_does_not_flag_plain_text_or_a_single_foreign_script(signed_in, cap):
    hold = one_hidden_hold(cap, "Москва")  # Cyrillic alone, beside Latin words in other fields
    html = signed_in.get(f"/holds/{hold.public_id}").content.decode()
    assert "hidden characters" not in html
    clean = factories.held_hold(cap)[1]
    assert "mixed scripts" not in signed_in.get(f"/holds/{clean.public_id}").content.decode()


def test_it_shows_the_agent_the_characters_the_reviewer_saw_marked(cap, member):
    """Marking is display only: what the agent receives is the exact string, hidden character included."""
    hold = one_hidden_hold(cap, "\u202e")
    services.hold_decide(
        hold_id=hold.pk, actor=actor_for_user(member), body={"items": [{"id": "INV\u202e1", "action": "approve"}]}
    )
    resume = hold.resumes.get().resume
    assert resume["items"][0]["id"] == "INV\u202e1" and resume["items"][0]["data"]["iban\u202e"] == "DE89\u202e3704"


def test_it_flags_hidden_characters_in_the_history(signed_in, cap, member):
    hold = one_hidden_hold(cap, "\u202e")
    services.hold_decide(
        hold_id=hold.pk, actor=actor_for_user(member), body={"items": [{"id": "INV\u202e1", "action": "approve"}]}
    )
    html = signed_in.get("/history").content.decode()
    assert mark_of("\u202e") in html
    assert "hidden characters" in html


def test_it_flags_hidden_characters_in_file_names(signed_in, cap):

    run = factories.start_run(cap)
    invocation, _ = factories.deliver_now(run)
    run_file = factories.run_file(run, name="invoice\u202egpj.exe", content=b"x", content_type="image/jpeg")
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body(files=[run_file.public_id]))
    html = signed_in.get(f"/holds/{hold.public_id}").content.decode()
    files = html[html.index('id="files-title"') :]
    files = files[: files.index("</section>")]
    assert mark_of("\u202e") in files
    assert "hidden characters" in files
