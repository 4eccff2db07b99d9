"""/healthz: JSON with the database and broker checks; 200 when both answer, 503 when one does not."""

import time

import pytest
from django.db import OperationalError

from holds import health

pytestmark = pytest.mark.django_db


def test_it_answers_200_when_the_database_and_the_broker_answer(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["checks"]["database"]["ok"] is True and body["checks"]["broker"]["ok"] is True
    assert "no-cache" in response["Cache-Control"] or "max-age=0" in response["Cache-Control"]


def test_it_answers_503_with_the_broker_down(client, settings):
    # A closed port: nothing listens on 1.
    settings.CELERY_BROKER_URL = "redis://:s3cret-password@127.0.0.1:1/0"
    settings.RQ_HEALTH_TIMEOUT = 1.0
    started = time.monotonic()
    response = client.get("/healthz")
    assert time.monotonic() - started < 10  # a dead broker never hangs the probe
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "fail"
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["broker"]["ok"] is False and body["checks"]["broker"]["error"]
    assert "s3cret" not in response.content.decode()


def test_it_answers_503_when_the_database_fails(client, monkeypatch):
    def broken():
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(health, "_database", broken)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == {
        "ok": False,
        "error": "OperationalError",
        "ms": response.json()["checks"]["database"]["ms"],
    }


def test_it_needs_no_sign_in_and_takes_only_get(client):
    assert client.get("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405
