"""The history page says what each version is: cdkd's lastModified from its body, its
resource count and size, and who wrote it (an operation by the ETag it recorded, a cdkd run
of the event store by time); any version downloads masked; the diff lists a resource's
changes property by property and shows times as dates. S3 is faked at stacks.history."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from unittest import mock

import pytest
from django.urls import reverse

from engine.backend import StoredObject, VersionInfo
from engine.errors import AccessDenied
from engine.schema import parse_state
from stacks import diff, history
from stacks.models import Operation, OperationStatus
from tests.views.conftest import make_stack, record, resource_row
from tests.views.test_events_pages import make_run

pytestmark = pytest.mark.django_db

KEY = "cdkd/web/us-east-1/state.json"
AT1 = datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC)  # inside run aaaa (08:00:00 - 08:01:00)
AT2 = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)  # no run


def url(stack, name: str, *extra) -> str:
    return reverse(name, args=[stack.account.account_id, stack.region_slug, stack.stack_name, *extra])


def info(vid, at, etag, size=100, latest=False) -> VersionInfo:
    return VersionInfo(KEY, vid, at, size, latest, False, etag)


def body(n_resources: int, last_modified: int, **extra) -> bytes:
    resources = {f"R{i}": resource_row(physical_id=f"p{i}") for i in range(n_resources)}
    return json.dumps(record("web", resources=resources, lastModified=last_modified, **extra)).encode()


def fake_s3(versions, bodies):
    return (
        mock.patch.object(history, "list_versions", autospec=True, return_value=versions),
        mock.patch.object(
            history,
            "get_version",
            autospec=True,
            side_effect=lambda s, vid, actor: StoredObject(KEY, bodies[vid], '"e"', vid, None),
        ),
    )


def test_it_shows_each_versions_last_modified_resources_size_and_writer(alice_client, alice, prod):
    stack = make_stack(prod, "web")
    Operation.objects.create(
        kind="orphan-resources",
        account=prod,
        stack_name="web",
        region="us-east-1",
        requester_name="olivia",
        plan={},
        plan_digest="d",
        status=OperationStatus.SUCCEEDED,
        etag_after='"etag-op"',
    )
    run = make_run(prod, "web", "20261201T080000000Z-aaaaaaaa", command="deploy")
    run.finished_at = datetime(2026, 12, 1, 8, 1, tzinfo=UTC)
    run.save()
    versions = [
        info("v3", AT2 + (AT2 - AT1), '"etag-op"', size=321, latest=True),
        info("v2", AT2, '"etag-x"'),
        info("v1", AT1, '"etag-run"'),
    ]
    bodies = {"v3": body(3, 1_764_600_000_000), "v2": body(2, 1_764_590_000_000), "v1": body(1, 1_764_576_030_000)}
    lv, gv = fake_s3(versions, bodies)
    with lv, gv:
        response = alice_client.get(url(stack, "stack_history"))
    assert response.status_code == 200
    rows = {r.version_id: r for r in response.context["versions"]}
    assert rows["v3"].record_last_modified == 1_764_600_000_000 and rows["v3"].resource_count == 3
    assert rows["v3"].writer.kind == "operation" and "olivia" in rows["v3"].writer.label
    assert rows["v1"].writer.kind == "run" and rows["v1"].writer.run.run_id == "20261201T080000000Z-aaaaaaaa"
    assert rows["v2"].writer is None
    html = response.content.decode()
    assert "2025-12-01 14:40:00" in html  # v3's lastModified (cdkd's clock, not S3's)
    assert ">321<" in html
    assert "cdkd deploy 20261201T080000000Z-aaaaaaaa" in html
    assert f'href="{url(stack, "stack_version_download")}?version_id=v2"' in html


def test_it_marks_a_version_whose_body_cannot_be_read(alice_client, prod):
    stack = make_stack(prod, "web")
    with (
        mock.patch.object(history, "list_versions", autospec=True, return_value=[info("v1", AT1, '"e"')]),
        mock.patch.object(history, "get_version", autospec=True, side_effect=AccessDenied("s3:GetObjectVersion")),
    ):
        response = alice_client.get(url(stack, "stack_history"))
    assert response.status_code == 200
    assert response.context["versions"][0].error and "unreadable" in response.content.decode()


def test_it_pages_the_versions_and_reads_only_the_page(alice_client, prod):
    stack = make_stack(prod, "web")
    versions = [info(f"v{i:02d}", AT1, f'"e{i}"') for i in range(45)]
    bodies = {v.version_id: body(0, 1) for v in versions}
    lv, gv = fake_s3(versions, bodies)
    with lv, gv as get_version:
        response = alice_client.get(url(stack, "stack_history"), {"page": 3})
    assert [r.version_id for r in response.context["versions"]] == [f"v{i}" for i in range(40, 45)]
    assert get_version.call_count == 5


def test_it_downloads_any_version_masked(alice_client, prod):
    stack = make_stack(prod, "web")
    secret = body(0, 1, outputs={"DbPassword": "hunter2-very-secret"})
    stored = StoredObject(KEY, secret, '"e"', "v1", None)
    with mock.patch.object(history, "get_version", autospec=True, return_value=stored) as get_version:
        response = alice_client.get(url(stack, "stack_version_download"), {"version_id": "v1"})
    assert get_version.call_args.args[1] == "v1"
    assert response.status_code == 200
    assert response["X-Cdkd-Masked"] == "yes"
    assert "attachment" in response["Content-Disposition"] and ".v1." in response["Content-Disposition"]
    assert b"hunter2-very-secret" not in response.content and b"***" in response.content


def test_it_refuses_a_download_without_a_version(alice_client, prod):
    stack = make_stack(prod, "web")
    assert alice_client.get(url(stack, "stack_version_download")).status_code == 404


def test_it_lists_an_added_resource_property_by_property_and_times_as_dates():
    before = parse_state(json.dumps(record("web", resources={}, lastModified=1_764_576_000_000)).encode())
    row = resource_row("AWS::SQS::Queue", "q-1", properties={"QueueName": "jobs", "DelaySeconds": 5})
    after = parse_state(json.dumps(record("web", resources={"Q": row}, lastModified=1_764_579_600_000)).encode())
    result = diff.diff_records(before, after)
    paths = [c.path for c in result.resources[0].changes]
    assert "properties.QueueName" in paths and "properties.DelaySeconds" in paths and "physicalId" in paths
    (lm,) = [c for c in result.fields if c.path == "lastModified"]
    assert lm.before_date == datetime(2025, 12, 1, 8, 0, tzinfo=UTC)
    assert lm.after_date == datetime(2025, 12, 1, 9, 0, tzinfo=UTC)


def test_it_shows_the_diffs_times_as_dates(alice_client, prod):
    stack = make_stack(prod, "web", data=record("web", lastModified=1_764_579_600_000))
    stored = StoredObject(KEY, body(0, 1_764_576_000_000), '"e"', "v1", None)
    with mock.patch.object(history, "get_version", autospec=True, return_value=stored):
        html = alice_client.get(url(stack, "stack_diff"), {"a": "v1", "b": "current"}).content.decode()
    assert "2025-12-01 08:00:00.000 UTC" in html and "2025-12-01 09:00:00.000 UTC" in html
