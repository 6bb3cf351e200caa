"""Liveness and readiness for load balancers and orchestrators (answers.health,
docs/deployment.md): answered before anything else runs, whatever the Host header, the
https redirect or a session; ready only while the process takes questions."""

from __future__ import annotations

import pytest
from django.test import Client

from answers.streams import generation

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/health/live", "/health/ready", "/health/ready/"])
def test_a_probe_by_the_process_address_is_answered(path, settings):
    """A probe addresses the process by its own IP over plain HTTP, which neither
    ALLOWED_HOSTS nor the https redirect of a production set-up would let through."""
    settings.ALLOWED_HOSTS = ["answers.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    response = Client().get(path, HTTP_HOST="10.1.2.3:8000")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"


def test_a_process_that_is_shutting_down_is_not_ready_but_alive(monkeypatch):
    monkeypatch.setattr(generation, "draining", True)
    ready = Client().get("/health/ready")
    assert ready.status_code == 503
    assert ready.json() == {"status": "unavailable", "problems": ["shutting_down"]}
    assert Client().get("/health/live").status_code == 200


def test_only_get_and_head_are_probes():
    assert Client().head("/health/ready").status_code == 200
    assert Client().post("/health/ready").status_code in (404, 405)


def test_the_probe_keeps_the_server_asynchronous():
    """Under daphne the middleware runs in the event loop: a synchronous one first in
    MIDDLEWARE would send every request through a thread (the one all database work
    shares) before anything else ran."""
    from asgiref.sync import iscoroutinefunction

    from answers.health import HealthCheckMiddleware

    async def get_response(request):  # type: ignore[no-untyped-def]
        raise AssertionError("not reached")

    assert iscoroutinefunction(HealthCheckMiddleware(get_response))


@pytest.mark.django_db(transaction=True)
async def test_a_probe_through_the_asgi_handler(monkeypatch):
    from django.test import AsyncClient

    assert (await AsyncClient().get("/health/ready")).json() == {"status": "ok"}
    monkeypatch.setattr(generation, "draining", True)
    response = await AsyncClient().get("/health/ready")
    assert response.status_code == 503 and response.json()["problems"] == ["shutting_down"]
