from __future__ import annotations

import json
from datetime import UTC, datetime
from unittest import mock

import pytest
from django.urls import reverse

from engine.backend import StoredObject, VersionInfo
from engine.errors import AccessDenied, BucketNotFound, NotFound
from stacks import history
from tests.views.conftest import make_stack, record, resource_row

pytestmark = pytest.mark.django_db

OLD = record("web", resources={"Bucket": resource_row(properties={"Versioning": "Off"})}, outputs={"A": "1"})
NEW = record(
    "web",
    resources={"Bucket": resource_row(properties={"Versioning": "On"}), "Queue": resource_row("AWS::SQS::Queue")},
    outputs={"A": "2", "B": "3"},
    lastModified=1_710_900_000_000,
)


def url(stack, name: str, *extra) -> str:
    return reverse(name, args=[stack.account.account_id, stack.region_slug, stack.stack_name, *extra])


def version(vid: str, *, latest=False, delete_marker=False) -> VersionInfo:
    return VersionInfo(
        "cdkd/web/us-east-1/state.json", vid, datetime(2024, 3, 19, tzinfo=UTC), 123, latest, delete_marker, None
    )


def stored(data: dict, vid: str) -> StoredObject:
    return StoredObject("cdkd/web/us-east-1/state.json", json.dumps(data).encode(), f'"{vid}"', vid, None)


def test_it_lists_versions_with_delete_markers(alice_client, alice, prod):
    stack = make_stack(prod, "web", data=NEW)
    versions = [version("v3", latest=True, delete_marker=True), version("v2"), version("v1")]
    with mock.patch.object(history, "list_versions", autospec=True, return_value=versions) as list_versions:
        response = alice_client.get(url(stack, "stack_history"))
    assert list_versions.call_args.args[0] == stack
    assert list_versions.call_args.kwargs == {"actor": "web-alice"}
    content = response.content.decode()
    assert response.status_code == 200
    assert "delete marker" in content
    assert url(stack, "stack_version", "v2") in content
    assert url(stack, "stack_version", "v3") not in content
    assert 'value="v1" aria-label="from v1" checked' in content


def test_it_shows_one_version(alice_client, prod):
    stack = make_stack(prod, "web", data=NEW)
    with mock.patch.object(history, "get_version", autospec=True, return_value=stored(OLD, "v1")) as get_version:
        response = alice_client.get(url(stack, "stack_version", "v1"))
    assert get_version.call_args.args[1] == "v1"
    assert response.status_code == 200
    assert "&quot;Versioning&quot;: &quot;Off&quot;" in response.content.decode()


def test_it_diffs_two_versions(alice_client, prod):
    stack = make_stack(prod, "web", data=NEW)
    bodies = {"v1": stored(OLD, "v1"), "v2": stored(NEW, "v2")}
    with mock.patch.object(history, "get_version", autospec=True, side_effect=lambda s, vid, actor: bodies[vid]):
        response = alice_client.get(url(stack, "stack_diff"), {"a": "v1", "b": "v2"})
    assert response.status_code == 200
    diff = response.context["diff"]
    assert [r.logical_id for r in diff.resources_added] == ["Queue"]
    assert [c.path for c in diff.resources_changed[0].changes] == ["properties.Versioning"]
    content = response.content.decode()
    assert "properties.Versioning" in content and "&quot;Off&quot;" in content and "&quot;On&quot;" in content
    assert "lastModified" in content


def test_it_diffs_a_version_against_the_current_record(alice_client, prod):
    stack = make_stack(prod, "web", data=NEW)
    with mock.patch.object(history, "get_version", autospec=True, return_value=stored(OLD, "v1")) as get_version:
        response = alice_client.get(url(stack, "stack_diff"), {"a": "v1", "b": "current"})
    get_version.assert_called_once()
    assert [o.path for o in response.context["diff"].outputs] == ["A", "B"]


def test_it_asks_for_both_sides_of_a_diff(alice_client, prod):
    stack = make_stack(prod, "web")
    with mock.patch.object(history, "get_version", autospec=True) as get_version:
        response = alice_client.get(url(stack, "stack_diff"), {"b": "current"})
    assert response.status_code == 400
    get_version.assert_not_called()


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (AccessDenied("s3:ListBucketVersions denied on bucket cdkd-state-111111111111"), 502),
        (BucketNotFound("Bucket cdkd-state-111111111111 does not exist"), 502),
    ],
)
def test_it_shows_engine_errors_on_the_history_page(alice_client, prod, error, status):
    stack = make_stack(prod, "web")
    with mock.patch.object(history, "list_versions", autospec=True, side_effect=error):
        response = alice_client.get(url(stack, "stack_history"))
    assert response.status_code == status
    assert str(error) in response.content.decode()
    assert b"Traceback" not in response.content


def test_it_answers_404_for_a_version_that_does_not_exist(alice_client, prod):
    stack = make_stack(prod, "web")
    error = NotFound("No version nope of cdkd/web/us-east-1/state.json")
    with mock.patch.object(history, "get_version", autospec=True, side_effect=error):
        assert alice_client.get(url(stack, "stack_version", "nope")).status_code == 404
        response = alice_client.get(url(stack, "stack_diff"), {"a": "nope", "b": "current"})
    assert response.status_code == 404
    assert str(error) in response.content.decode()


def test_it_shows_access_denied_on_a_version_as_502(alice_client, prod):
    stack = make_stack(prod, "web")
    error = AccessDenied("s3:GetObjectVersion denied on cdkd-state-111111111111/cdkd/web/us-east-1/state.json")
    with mock.patch.object(history, "get_version", autospec=True, side_effect=error):
        response = alice_client.get(url(stack, "stack_version", "v1"))
    assert response.status_code == 502
    assert "s3:GetObjectVersion" in response.content.decode()


def test_it_shows_a_version_whose_ids_hold_a_lone_surrogate(alice_client, prod):
    stack = make_stack(prod, "web", data=NEW)
    body = b'{"version": 11, "resources": {"Q\\ud800": {"resourceType": "AWS::SQS::Queue", "physicalId": "q\\ud800"}}}'
    damaged = StoredObject("cdkd/web/us-east-1/state.json", body, '"v1"', "v1", None)
    with mock.patch.object(history, "get_version", autospec=True, return_value=damaged):
        response = alice_client.get(url(stack, "stack_version", "v1"))
    assert response.status_code == 200
    assert b"\\ud800" in response.content
