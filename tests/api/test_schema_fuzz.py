"""schemathesis against the served schema (/api/schema/), in process: the Django WSGI app
itself, called with a superuser's token, so every route is reached past authentication.
Each route gets a bounded number of generated requests (`MAX_EXAMPLES`; the same ones on
every run under the repeatable Hypothesis profile, tests/conftest.py); the checks are
"no 5xx" and "the response conforms to the schema" (status documented, body valid).

FAKE ENGINE: `compute_plan` is replaced (a generated request for an operation would
otherwise plan against S3); the pipeline, access checks and serialisers are the real ones.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from cdkd_site.wsgi import application
from tests.api.conftest import build_world, token_for

pytestmark = pytest.mark.django_db

MAX_EXAMPLES = int(os.environ.get("CDKD_API_FUZZ_EXAMPLES", "25"))


# Loaded from the served endpoint through the WSGI app at collection (it needs no database).
schema = schemathesis.openapi.from_wsgi("/api/schema/", application)


@pytest.fixture
def superuser_token(db, planned):
    """A world to call into, and a token that reaches every route of it. The app runs in
    the test's thread and transaction; like Django's test client, keep a finished request
    from closing the test's database connection."""
    world = build_world()
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield token_for(world["people"]["superuser"])
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_it_answers_every_generated_request_within_its_schema(case, superuser_token):
    case.call_and_validate(
        headers={"Authorization": f"Bearer {superuser_token}"},
        checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
    )
