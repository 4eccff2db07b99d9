"""holds/rendering.py: the one sanitiser, values exactly as sent, hidden characters and look-alikes."""

import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from holds import rendering
from holds.markup import to_html as render_markdown
from holds.rendering import show_value, visible


def test_it_escapes_raw_html_in_markdown_instead_of_rendering_it():
    html = render_markdown("Hi <img src=x onerror=alert(1)> <script>alert(2)</script> <b>bold</b>")
    assert "<img" not in html and "<script" not in html and "<b>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "&lt;script&gt;" in html


def test_it_keeps_markdown_formatting():
    html = render_markdown("**edit** the _payee_\n\n- one\n- two\n\n`code`")
    assert "<strong>edit</strong>" in html and "<em>payee</em>" in html and "<li>one</li>" in html
    assert "<code>code</code>" in html


@pytest.mark.parametrize(
    "link",
    [
        "javascript:alert(1)",
        "JaVaScRiPt:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "vbscript:x",
        "&#106;avascript:alert(1)",
        "java\tscript:alert(1)",
    ],
)
def test_it_drops_links_that_are_not_http_https_or_mailto(link):
    html = render_markdown(f"[click]({link})")
    assert "href" not in html and "click" in html


def test_it_keeps_safe_links_with_a_rel_that_leaks_nothing():
    html = render_markdown("[site](https://example.com/a?b=1&c=2) [mail](mailto:ops@example.com)")
    assert 'href="https://example.com/a?b=1&amp;c=2"' in html and 'href="mailto:ops@example.com"' in html
    assert html.count('rel="noopener noreferrer nofollow"') == 2


def test_it_replaces_images_by_their_alt_text_and_url():
    html = render_markdown("![the chart](https://evil.example/track.png) ![](/logout/)")
    assert "<img" not in html
    assert "[image: the chart] https://evil.example/track.png" in html and "[image] /logout/" in html


def test_it_keeps_no_attribute_an_agent_wrote():
    html = render_markdown(
        '<a href="https://x.example" hx-get="/logout/" onclick="x()" style="color:red">a</a>\n\n| a |\n|:--|\n| 1 |'
    )
    attributes = {name for _, attrs in elements(html) for name, _ in attrs}
    assert attributes == set(), attributes  # not even the table's own style="text-align: left"
    assert "&lt;a href" in html  # raw HTML stays text
    assert "<table>" in html and "<td>1</td>" in html


def elements(html: str) -> list[tuple[str, list]]:
    from html.parser import HTMLParser

    found = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, attrs))

    Collect().feed(html)
    return found


def test_it_keeps_agent_headings_out_of_the_page_outline():
    html = render_markdown("# Approved by security\n\n## Step 2")
    assert "<h1" not in html and "<h2" not in html and '<p class="md-heading">Approved by security</p>' in html


def test_it_leaves_template_syntax_as_text():
    assert "{{ request.user }}" in render_markdown("{{ request.user }} {% csrf_token %}")


@pytest.mark.parametrize(
    "char",
    [
        "\u200b",
        "\u200c",
        "\u200d",
        "\u2060",
        "\ufeff",
        "\u202a",
        "\u202b",
        "\u202c",
        "\u202d",
        "\u202e",
        "\u2066",
        "\u2067",
        "\u2068",
        "\u2069",
        "\u00ad",
        "\x07",
        "\r",
        "\u2028",
        "\U000e0041",
    ],
)
def test_it_makes_each_hidden_or_bidi_character_visible_and_flags_it(char):
    shown = show_value(f"pay{char}me")
    assert f"⟦U+{ord(char):04X}⟧" in shown.html and char not in shown.html
    assert "hidden characters" in shown.flags
    assert f"⟦U+{ord(char):04X}⟧" in visible(f"a{char}b")
    assert f"⟦U+{ord(char):04X}⟧" in render_markdown(f"a{char}b")


def test_it_leaves_newlines_and_tabs_as_layout():
    shown = show_value("line one\n\tline two")
    assert shown.flags == [] and shown.multiline and "\n\t" in shown.html


@pytest.mark.parametrize(
    ("text", "flag"),
    [("P\u0430yPal", "mixed scripts: Latin with Cyrillic"), ("\u039fpen", "mixed scripts: Latin with Greek")],
)
def test_it_flags_latin_mixed_with_cyrillic_or_greek(text, flag):
    assert flag in show_value(text).flags
    assert flag in rendering.text_flags(text)


def test_it_does_not_flag_a_single_script():
    assert show_value("Москва").flags == [] and show_value("Αθήνα").flags == [] and show_value("Zürich").flags == []


def test_it_flags_hidden_characters_inside_nested_values_and_keys():
    assert "hidden characters" in show_value({"a": ["ok", "b\u202ec"]}).flags
    assert "mixed scripts: Latin with Cyrillic" in show_value({"p\u0430y": 1}).flags


def test_it_shows_each_json_type_and_the_value_as_sent():
    cases = [
        ("120.00", "string", "120.00"),
        (120, "integer", "120"),
        (10**30, "integer", "1" + "0" * 30),
        (0.1, "number", "0.1"),
        (1e300, "number", "1e+300"),
        (None, "null", "null"),
        (True, "boolean", "true"),
        ([1, "a"], "array", "[\n  1,\n  &quot;a&quot;\n]"),
        ({"k": None}, "object", "{\n  &quot;k&quot;: null\n}"),
    ]
    for value, kind, html in cases:
        shown = show_value(value)
        assert (shown.type, str(shown.html)) == (kind, html)


def test_it_notes_leading_and_trailing_spaces():
    assert show_value("  x").edge_spaces == "leading"
    assert show_value("x ").edge_spaces == "trailing"
    assert show_value(" x ").edge_spaces == "leading and trailing"
    assert show_value("x").edge_spaces == ""


def test_it_shows_a_very_long_value_in_full():
    long = "x" * 100_000
    assert len(str(show_value(long).html)) == 100_000


@pytest.mark.parametrize(
    ("value", "level"), [(0.95, ""), (0.8, ""), (0.79, "amber"), (0.5, "amber"), (0.49, "red"), (0, "red"), (None, "")]
)
def test_it_gives_confidence_amber_below_0_8_and_red_below_0_5(value, level):
    assert rendering.confidence_level(value) == level


def test_threads_rendering_at_once_each_get_their_own_text_back():
    """A gunicorn worker renders asks on several threads: a sanitiser shared between them raised
    (a 500 on the ask) or returned another text's HTML cut short (the two-host test's 500s)."""
    render = render_markdown.__wrapped__  # past the cache, so that every call renders
    texts = [f"Pay **{n}** to [payee](https://example.com/{n}) as _shown_.\n\n- a\n- b {n}" for n in range(64)]
    expected = {text: render(text) for text in texts}
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often, as they do under load
    try:
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda n: (texts[n % 64], render(texts[n % 64])), range(2000)))
    finally:
        sys.setswitchinterval(switch)
    assert [text for text, html in got if html != expected[text]] == []
