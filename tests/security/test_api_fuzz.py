"""19. Schemathesis against the app's own OpenAPI schema, in process, with auth."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS

from answers.api import api
from tests.helpers import bearer_headers, bearer_token

pytestmark = pytest.mark.django_db

schema = schemathesis.openapi.from_wsgi("/api/openapi.json", get_wsgi_application())

CHECK_NAMES = (
    "not_a_server_error",
    "response_schema_conformance",
    "negative_data_rejection",
    "ignored_auth",
)


def _checks():  # type: ignore[no-untyped-def]
    return [check for check in CHECKS.get_all() if check.__name__ in CHECK_NAMES]


@pytest.fixture(autouse=True)
def keep_the_test_connection_open():  # type: ignore[no-untyped-def]
    # As Django's test client does: a request must not close the test's transaction.
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def token(asker, settings):  # type: ignore[no-untyped-def]
    # The fuzzer asks many questions quickly: lift the abuse limits for this test only.
    settings.ANSWERS = {
        **settings.ANSWERS, "QUESTIONS_PER_MINUTE": 100_000, "MAX_CONCURRENT_STREAMS": 1000,
    }  # fmt: skip
    return bearer_token(asker, name="fuzz")


@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_api_conforms_to_its_schema(case, token):  # type: ignore[no-untyped-def]
    case.call_and_validate(headers=bearer_headers(raw=token), checks=_checks())


def test_every_operation_is_fuzzed():
    operations = {(op["method"].upper(), op["path"]) for op in _operations()}
    assert operations == {
        ("POST", "/api/answers"), ("GET", "/api/answers"),
        ("GET", "/api/answers/{answer_id}"), ("POST", "/api/answers/{answer_id}/feedback"),
        ("GET", "/api/answers/{answer_id}/events"), ("POST", "/api/answers/{answer_id}/stop"),
    }  # fmt: skip
    assert {check.__name__ for check in _checks()} == set(CHECK_NAMES)


def _operations():  # type: ignore[no-untyped-def]
    spec = api.get_openapi_schema()
    for path, methods in spec["paths"].items():
        for method in methods:
            yield {"method": method, "path": path}
