"""CSP on every page, htmx locked down, no inline handlers, and `check --deploy` clean in production."""

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests import factories

ROOT = Path(__file__).resolve().parents[1]


def directives(header: str) -> dict[str, list[str]]:
    out = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            out[words[0]] = words[1:]
    return out


class Elements(HTMLParser):
    def __init__(self, html: str):
        super().__init__()
        self.found: list[tuple[str, dict]] = []
        self.inline_scripts = 0
        self._in_script = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.found.append((tag, attrs))
        self._in_script = tag == "script"

    def handle_data(self, data):
        if self._in_script and data.strip():
            self.inline_scripts += 1

    def handle_endtag(self, tag):
        self._in_script = False


@pytest.fixture
def pages(client, cap, member):
    """Every reviewer page and fragment, as (name, response)."""
    _, pending = factories.held_hold(cap)
    _, decided = factories.held_hold(cap)
    from holds import services
    from holds.auth import actor_for_user

    services.hold_decide(
        hold_id=decided.pk,
        actor=actor_for_user(member),
        body={"items": [{"id": "INV-1", "action": "approve"}, {"id": "INV-2", "action": "approve"}]},
    )
    out = [("login", client.get("/login/"))]
    client.force_login(member)
    hx = {"HX-Request": "true"}
    out += [
        ("queue", client.get("/")),
        ("queue fragment", client.get("/", headers=hx)),
        ("history", client.get("/history")),
        ("history fragment", client.get("/history", headers=hx)),
        ("hold", client.get(f"/holds/{pending.public_id}")),
        ("decided hold", client.get(f"/holds/{decided.public_id}")),
        ("delivery fragment", client.get(f"/holds/{decided.public_id}", headers={**hx, "HX-Target": "delivery"})),
        (
            "last look",
            client.post(f"/holds/{pending.public_id}/review", {"fingerprint": pending.fingerprint, "approve_all": "1"}),
        ),
        (
            "last look fragment",
            client.post(
                f"/holds/{pending.public_id}/review",
                {"fingerprint": pending.fingerprint, "approve_all": "1"},
                headers=hx,
            ),
        ),
        ("refusal", client.post(f"/holds/{decided.public_id}/decision", {"decision": "{}", "fingerprint": "x"})),
    ]
    for name, response in out:
        assert response.status_code in (200, 409, 422), (name, response.status_code)
    return out


@pytest.mark.django_db
def test_it_sends_the_csp_on_every_page_and_fragment(pages):
    nonces = set()
    for name, response in pages:
        header = response["Content-Security-Policy"]
        policy = directives(header)
        assert policy["default-src"] == ["'self'"], name
        script = policy["script-src"]
        # 'self' and, where the page loads scripts, this response's nonce (a fragment needs none).
        assert script[0] == "'self'" and all(s.startswith("'nonce-") for s in script[1:]), (name, script)
        assert len(script) == (2 if "<html" in response.content.decode() else 1), (name, script)
        assert "'unsafe-inline'" not in header and "'unsafe-eval'" not in header, name
        assert "'strict-dynamic'" not in header and "*" not in header.replace("*/", ""), name
        assert policy["img-src"] == ["'self'", "data:"], name
        assert policy["frame-ancestors"] == ["'none'"], name
        assert policy["form-action"] == ["'self'"], name
        assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'none'"], name
        assert response["X-Frame-Options"] == "DENY", name
        assert response["X-Content-Type-Options"] == "nosniff", name
        nonces.update(script[1:])
    full_pages = [name for name, r in pages if "<html" in r.content.decode()]
    assert len(nonces) == len(full_pages) >= 6, "a nonce is new on every page"


@pytest.mark.django_db
def test_it_configures_htmx_without_eval_script_tags_or_other_origins(pages):
    for name, response in pages:
        html = response.content.decode()
        metas = [a for tag, a in Elements(html).found if tag == "meta" and a.get("name") == "htmx-config"]
        if "<html" not in html:
            assert metas == [], name  # fragments are swapped into a page that has it
            continue
        assert len(metas) == 1, name
        config = json.loads(metas[0]["content"])
        assert config["allowEval"] is False and config["allowScriptTags"] is False, name
        assert config["selfRequestsOnly"] is True, name


@pytest.mark.django_db
def test_it_has_no_inline_script_or_event_handler_in_any_page(pages):
    for name, response in pages:
        html = response.content.decode()
        parsed = Elements(html)
        assert parsed.inline_scripts == 0, name
        script_src = directives(response["Content-Security-Policy"])["script-src"]
        nonce = script_src[1][len("'nonce-") : -1] if len(script_src) > 1 else None
        for tag, attrs in parsed.found:
            handlers = [a for a in attrs if a.startswith("on")]
            assert handlers == [], (name, tag, handlers)
            assert "style" not in attrs, (name, tag, attrs)  # style-src 'self' would block it
            for link in ("href", "src", "action", "formaction"):
                assert not (attrs.get(link) or "").lower().startswith("javascript:"), (name, tag, attrs)
            if tag == "script":
                assert attrs.get("src", "").startswith("/static/") and attrs.get("nonce") == nonce, (name, attrs)
            if tag == "a" and (attrs.get("href") or "").startswith(("http:", "https:")):
                assert "noopener" in (attrs.get("rel") or ""), (name, attrs)


# --- manage.py check --deploy --------------------------------------------------------------------

# pytest-env relaxes these for plain-HTTP tests, and the browser tests allow async-unsafe calls;
# production sets none of them.
RELAXED = {
    "SECURE_SSL_REDIRECT",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
}
PRODUCTION = {
    "DEBUG": "0",
    "SECRET_KEY": "pr0d-" + "Xq7#Lm2@Vb9&Nz4!Kd8%Rt6^" * 3,
    "ALLOWED_HOSTS": "rq.example.com",
    "RQ_PUBLIC_URL": "https://rq.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://rq.example.com",
    "RQ_BEHIND_PROXY": "1",
    "DATABASE_URL": "postgres://rq@127.0.0.1:5432/rq_prod",
}


def check_deploy(**overrides) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in RELAXED and not k.startswith("PYTEST")}
    env.update(PRODUCTION, **overrides)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_passes_check_deploy_with_production_settings_with_0_warnings():
    result = check_deploy()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout, result.stdout + result.stderr


def test_it_fails_check_deploy_when_a_safeguard_is_turned_off():
    """The check above can fail: without HSTS and secure cookies, Django says so."""
    result = check_deploy(SECURE_HSTS_SECONDS="0", SESSION_COOKIE_SECURE="0", SECURE_SSL_REDIRECT="0")
    assert result.returncode != 0
    for code in ("security.W004", "security.W008", "security.W012"):
        assert code in result.stderr + result.stdout, code


def test_it_sends_production_mail_over_smtp_by_default_so_check_deploy_has_no_mail_e001():
    """The default mail backend was the console, which Django's deploy check calls mail.E001."""
    result = check_deploy()
    assert "mail.E001" not in result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    console = check_deploy(EMAIL_BACKEND="django.core.mail.backends.console.EmailBackend")
    assert "mail.E001" in console.stdout + console.stderr  # the check can fail


def settings_under(**env) -> subprocess.CompletedProcess:
    """Loads the settings in a process of their own, with production's environment and `env`."""
    base = {k: v for k, v in os.environ.items() if k not in RELAXED and not k.startswith("PYTEST")}
    script = (
        "from django.conf import settings; from django.core import mail; m = mail.mailers.default; "
        "print(settings.MAILERS['default']['BACKEND'], getattr(m, 'host', '-'), getattr(m, 'port', '-'), "
        "getattr(m, 'username', '-'), getattr(m, 'use_tls', '-'), getattr(m, 'timeout', '-'), "
        "settings.DEFAULT_FROM_EMAIL, settings.RQ_NOTIFY_FROM)"
    )
    return subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {script}"],
        cwd=ROOT,
        env={**base, **PRODUCTION, "DJANGO_SETTINGS_MODULE": "reviewqueue.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_configures_smtp_from_the_environment_and_the_console_only_with_debug():
    smtp = settings_under(
        EMAIL_HOST="smtp.example.com",
        EMAIL_PORT="2525",
        EMAIL_HOST_USER="rq",
        EMAIL_HOST_PASSWORD="pw",
        EMAIL_USE_TLS="1",
        DEFAULT_FROM_EMAIL="rq@example.com",
    )
    assert smtp.returncode == 0, smtp.stderr
    assert smtp.stdout.split()[-8:] == [
        "django.core.mail.backends.smtp.EmailBackend",
        "smtp.example.com",
        "2525",
        "rq",
        "True",
        "10",
        "rq@example.com",
        "rq@example.com",
    ]
    debug = settings_under(DEBUG="1")
    assert debug.returncode == 0, debug.stderr
    assert debug.stdout.split()[0] == "django.core.mail.backends.console.EmailBackend"


@pytest.mark.parametrize("key", ["short", "x" * 49, "ab" * 30])
def test_it_refuses_to_start_in_production_with_a_short_or_plain_secret_key(key):
    """Run tokens are MACs under a key derived from SECRET_KEY; any length was accepted."""
    result = settings_under(SECRET_KEY=key)
    assert result.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY must be at least 50 characters" in result.stderr, result.stderr


def test_it_accepts_a_short_secret_key_only_with_debug():
    assert settings_under(SECRET_KEY="short", DEBUG="1").returncode == 0
    assert settings_under(SECRET_KEY="k3y-" + "Zp8#" * 12).returncode == 0  # 52 characters


# --- Cache-Control on private answers -------------------------------------------------------------


@pytest.mark.django_db
def test_it_marks_every_signed_in_page_private_and_not_to_be_stored(pages):
    for name, response in pages:
        if name == "login":
            continue
        assert response["Cache-Control"] == "private, no-store", name


@pytest.mark.django_db
def test_it_marks_file_downloads_and_api_answers_private_and_not_to_be_stored(client, cap, member, member_key):

    from holds import services

    run = factories.start_run(cap)
    invocation, token = factories.deliver_now(run)
    run_file = factories.run_file(run, name="a.pdf", content=b"%PDF-1.4", content_type="application/pdf")
    hold = services.hold_ask(invocation=invocation, body=factories.ask_body(files=[run_file.public_id]))
    key = {"authorization": f"Bearer {member_key}"}
    answers = [
        client.get(f"/v0/files/{run_file.public_id}", headers={"x-agentos-run-token": token}),
        client.get(f"/v0/files/{run_file.public_id}", headers=key),
        client.get(f"/v0/holds/{hold.public_id}", headers=key),
        client.get(f"/v0/runs/{run.public_id}", headers=key),
    ]
    client.force_login(member)
    answers += [client.get(f"/files/{run_file.public_id}"), client.get(f"/v0/files/{run_file.public_id}")]
    for response in answers:
        assert response.status_code == 200
        assert response["Cache-Control"] == "private, no-store", response.request["PATH_INFO"]
