"""The stack page's tabs (Overview, Resources, Outputs, Events, History): each its own URL,
a full page without JavaScript and just the tab for htmx; console links and copy buttons;
the lock card's verdict and the leftover rollback journal from the mirror.

alice views prod and dev; bob views dev only. The History tab reads S3 through
stacks.history, faked here (`fake_s3`); nothing else on these pages reads S3 at all."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from engine.backend import StateBucket, StoredObject, VersionInfo
from engine.errors import AccessDenied
from stacks import history
from stacks.models import AuditEvent, DeploymentEvent, DeploymentRun, Stack, now_ms
from tests.views.conftest import make_lock, make_stack, record, resource_row

pytestmark = pytest.mark.django_db

TABS = ["stack", "stack_resources", "stack_outputs", "stack_events", "stack_history"]
HTMX_TAB = {"HX-Request": "true", "HX-Target": "stack-tab"}
AT = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def versions_of(stack) -> list[VersionInfo]:
    """Two versions of a small stack, 45 of any other (the tab shows 20 at a time)."""
    n = 2 if stack.stack_name == "web" else 45
    return [
        VersionInfo(stack.key, f"v{i:02d}", AT - timedelta(hours=i), 100 + i, i == 0, False, f'"etag-{i}"')
        for i in range(n)
    ]


@pytest.fixture(autouse=True)
def fake_s3():
    """S3 behind stacks.history: versions as above, each body a small record."""

    def get_version(stack, version_id, actor):
        body = json.dumps(record(stack.stack_name, resources={"A": resource_row()}, lastModified=1_764_576_000_000))
        return StoredObject(stack.key, body.encode(), '"e"', version_id, AT)

    with (
        mock.patch.object(history, "list_versions", autospec=True, side_effect=lambda s, actor: versions_of(s)) as lv,
        mock.patch.object(history, "get_version", autospec=True, side_effect=get_version) as gv,
    ):
        yield mock.Mock(list_versions=lv, get_version=gv)


def url(stack, name: str = "stack") -> str:
    return reverse(name, args=[stack.account.account_id, stack.region_slug, stack.stack_name])


def web(account):
    data = record(
        "web",
        resources={
            "Bucket": resource_row("AWS::S3::Bucket", "web-bucket-with-a-rather-long-name-0123456789"),
            "Topic": resource_row("AWS::SNS::Topic", "arn:aws:sns:us-east-1:111111111111:alerts"),
            "Table": resource_row("AWS::Glue::Table", "analytics|events|v2"),
            "Thing": resource_row("Custom::Thing", "thing-1"),
        },
        outputs={"BucketName": "web-bucket-with-a-rather-long-name-0123456789"},
    )
    return make_stack(account, "web", data=data, etag='"etag-web"')


def run(stack, *, minutes_ago: int, finished: bool, last_event_minutes_ago: float | None = None):
    started = timezone.now() - timedelta(minutes=minutes_ago)
    r = DeploymentRun.objects.create(
        account=stack.account,
        stack_name=stack.stack_name,
        region=stack.region,
        run_id=started.strftime("%Y%m%dT%H%M%S000Z") + "-abcd1234",
        command="deploy",
        started_at=started,
        run_at=started,
        result="SUCCEEDED" if finished else "UNKNOWN",
        finished_at_raw=started.isoformat() if finished else "",
        in_index=True,
    )
    if last_event_minutes_ago is not None:
        for seq, kind in enumerate(["RUN_STARTED", "RESOURCE_STARTED"]):
            DeploymentEvent.objects.create(
                run=r, seq=seq, event_type=kind, timestamp=timezone.now() - timedelta(minutes=last_event_minutes_ago)
            )
    return r


@pytest.mark.parametrize("name", TABS)
def test_each_tab_is_a_full_page_and_an_htmx_partial(alice_client, prod, name):
    stack = web(prod)
    page = alice_client.get(url(stack, name))
    assert page.status_code == 200
    content = page.content.decode()
    assert "<html" in content and 'id="stack-tab"' in content
    assert f'href="{url(stack, name)}" hx-get="{url(stack, name)}"' in content
    current = content.split('aria-current="page"')[0].rsplit("<a ", 1)[1]
    assert f'href="{url(stack, name)}"' in current  # the tab itself is marked current
    partial = alice_client.get(url(stack, name), headers=HTMX_TAB)
    assert partial.status_code == 200
    body = partial.content.decode()
    assert "<html" not in body and body.lstrip().startswith('<div id="stack-tab">')
    assert 'id="stack-operations"' not in body  # the action bar stays outside the tab


def test_each_tab_shows_only_its_own_section(alice_client, prod):
    stack = web(prod)
    overview = alice_client.get(url(stack)).content.decode()
    resources = alice_client.get(url(stack, "stack_resources")).content.decode()
    outputs = alice_client.get(url(stack, "stack_outputs")).content.decode()
    events = alice_client.get(url(stack, "stack_events")).content.decode()
    assert 'aria-label="Lock"' in overview and 'id="res-Bucket"' not in overview
    versions = alice_client.get(url(stack, "stack_history")).content.decode()
    assert 'id="res-Bucket"' in resources and 'aria-label="Lock"' not in resources
    assert "BucketName" in outputs and 'id="res-Bucket"' not in outputs
    assert 'id="stack-runs"' in events and "BucketName" not in events
    assert 'id="versions"' in versions and 'id="stack-runs"' not in versions and 'aria-label="Lock"' not in versions
    assert not any('id="versions"' in page for page in (overview, resources, outputs, events))


def test_the_tabs_answer_only_account_members(client, bob, prod):
    stack = web(prod)
    client.force_login(bob)
    for name in TABS:
        assert client.get(url(stack, name)).status_code == 404
        assert client.get(url(stack, name), headers=HTMX_TAB).status_code == 404
    client.logout()
    assert client.get(url(stack, "stack_resources")).status_code == 302


def test_the_resource_filter_answers_on_the_resources_tab(alice_client, prod):
    stack = web(prod)
    page = alice_client.get(url(stack, "stack_resources")).content.decode()
    tab = url(stack, "stack_resources")
    assert f'action="{tab}" hx-get="{tab}" hx-target="#resources"' in page
    partial = alice_client.get(tab, {"q": "sns"}, headers={"HX-Request": "true", "HX-Target": "resources"})
    body = partial.content.decode()
    assert body.lstrip().startswith('<div id="resources"') and body.count('<tr id="res-') == 1


def test_physical_ids_link_to_the_console_and_have_copy_buttons(alice_client, prod):
    stack = web(prod)
    content = alice_client.get(url(stack, "stack_resources")).content.decode()
    bucket = "web-bucket-with-a-rather-long-name-0123456789"
    assert (
        f'<a class="physical" href="https://s3.console.aws.amazon.com/s3/buckets/{bucket}?region=us-east-1"' in content
    )
    assert "https://us-east-1.console.aws.amazon.com/sns/v3/home?region=us-east-1#/topic/arn%3Aaws%3Asns" in content
    assert '<span class="physical">thing-1</span>' in content  # no page known: no link
    assert "word-break: break-all" not in content
    for value in [bucket, "arn:aws:sns:us-east-1:111111111111:alerts", "analytics|events|v2", "thing-1"]:
        assert f'data-copy value="{value}"' in content, value
    overview = alice_client.get(url(stack)).content.decode()
    for value in ["&quot;etag-web&quot;", "cdkd/web/us-east-1/state.json", "111111111111", "cdkd-state-111111111111"]:
        assert f'data-copy value="{value}"' in overview, value
    outputs = alice_client.get(url(stack, "stack_outputs")).content.decode()
    assert 'data-copy value="BucketName"' in outputs and f'data-copy value="{bucket}"' in outputs


def test_the_page_loads_copy_js_from_a_file(alice_client, prod):
    content = alice_client.get(url(web(prod))).content.decode()
    assert '<script src="/static/stacks/copy.js" defer></script>' in content
    assert " onclick=" not in content and "hx-on" not in content


def test_the_lock_card_says_likely_alive_when_the_holder_writes(alice_client, prod):
    stack = web(prod)
    make_lock(stack)  # taken a minute ago, ten minutes left
    run(stack, minutes_ago=0, finished=False, last_event_minutes_ago=0.5)
    response = alice_client.get(url(stack))
    content = response.content.decode()
    assert response.context["lock_card"].verdict == "likely alive"
    assert 'data-verdict="likely alive"' in content
    assert "minutes left" in content.split('id="lock-time-left">')[1][:40]
    assert "Holder's last event: <code>RESOURCE_STARTED</code>" in content
    assert "Rollback journal: unknown" in content


def test_the_lock_card_says_likely_abandoned_when_the_holders_run_finished(alice_client, prod):
    stack = web(prod)
    make_lock(stack, expires_in_ms=-3_600_000)
    run(stack, minutes_ago=0, finished=True, last_event_minutes_ago=0)
    content = alice_client.get(url(stack)).content.decode()
    assert 'data-verdict="likely abandoned"' in content
    assert "has finished (SUCCEEDED), yet the lock is still there" in content
    assert "expired 1 hour ago" in content


def test_the_lock_card_sets_the_records_write_against_the_lock(alice_client, prod):
    stack = web(prod)
    lock = make_lock(stack)
    stack.record_last_modified = lock.timestamp_ms + 20_000
    stack.s3_last_modified = None
    stack.save()
    content = alice_client.get(url(stack)).content.decode()
    assert "The record was written after the lock was taken" in content
    stack.record_last_modified = now_ms() - 7_200_000
    stack.save()
    assert "before the lock" in alice_client.get(url(stack)).content.decode()


@pytest.mark.parametrize("name", TABS)
def test_the_query_count_of_each_tab_is_flat(alice_client, prod, django_assert_max_num_queries, name):
    small = web(prod)
    make_lock(small)
    run(small, minutes_ago=1, finished=False, last_event_minutes_ago=1)
    with CaptureQueriesContext(connection) as ctx:
        alice_client.get(url(small, name))
    rows = {f"R{i:04}": resource_row("AWS::SNS::Topic", f"arn:aws:sns:us-east-1:1:t{i}") for i in range(600)}
    big = make_stack(prod, "big", data=record("big", resources=rows, outputs={f"O{i}": "v" for i in range(600)}))
    make_lock(big)
    for i in range(30):
        run(big, minutes_ago=i, finished=True, last_event_minutes_ago=i)
    with django_assert_max_num_queries(len(ctx.captured_queries)):
        alice_client.get(url(big, name))
    with django_assert_max_num_queries(len(ctx.captured_queries)):
        alice_client.get(url(big, name), headers=HTMX_TAB)


def test_it_serves_history_as_a_tab_with_everything_a_version_says(alice_client, prod):
    stack = web(prod)
    AuditEvent.objects.create(
        action="restore", actor="olivia", account=prod, stack_name="web", region="us-east-1", etag_after='"etag-1"'
    )
    body = alice_client.get(url(stack, "stack_history"), headers=HTMX_TAB).content.decode()
    assert body.lstrip().startswith('<div id="stack-tab">') and "<html" not in body
    history_url = url(stack, "stack_history")
    assert f'href="{history_url}" hx-get="{history_url}"' in body and 'data-tab="history" aria-current="page"' in body
    row = body.split('aria-label="from v01"')[1].split("</tr>")[0]
    assert '<time datetime="2025-12-01T08:00:00+00:00">2025-12-01 08:00:00</time>' in row  # cdkd's lastModified
    assert '<td class="num">1</td>' in row and '<td class="num">101</td>' in row  # resources, size
    assert "restore by olivia" in row  # the audited write of that ETag
    assert f'href="{url(stack, "stack_version_download")}?version_id=v01">Download</a>' in row
    assert f'action="{url(stack, "stack_diff")}"' in body  # the diff of any two
    page = alice_client.get(history_url).content.decode()
    assert "<html" in page and 'id="stack-secrets"' in page and 'id="versions"' in page


def test_it_pages_the_history_inside_the_tab(alice_client, prod):
    big = make_stack(prod, "big")
    tab = url(big, "stack_history")
    first = alice_client.get(tab, headers=HTMX_TAB)
    assert first.content.decode().count('name="a" value="v') == 20
    older = f'href="{tab}?page=2" hx-get="{tab}?page=2" hx-target="#stack-tab" hx-swap="outerHTML" hx-push-url="true"'
    assert older in first.content.decode()
    last = alice_client.get(tab, {"page": 3})
    assert [v.version_id for v in last.context["versions"]] == [f"v{i}" for i in range(40, 45)]
    assert f'href="{tab}?page=2"' in last.content.decode()


def test_it_says_in_the_tab_when_the_versions_cannot_be_listed(alice_client, prod, fake_s3):
    stack = web(prod)
    error = AccessDenied("s3:ListBucketVersions denied on bucket cdkd-state-111111111111")
    fake_s3.list_versions.side_effect = error
    page = alice_client.get(url(stack, "stack_history"))
    partial = alice_client.get(url(stack, "stack_history"), headers=HTMX_TAB)
    assert page.status_code == 502 and "<html" in page.content.decode()
    assert str(error) in page.content.decode().split('id="stack-tab"')[1]
    # htmx swaps only a 2xx answer: the tab comes back 200 and says what failed.
    assert partial.status_code == 200 and str(error) in partial.content.decode()
    assert 'data-code="history-unreadable"' in partial.content.decode()


def test_a_resource_link_from_before_the_tabs_lands_on_the_resources_tab(alice_client, prod):
    stack = web(prod)
    response = alice_client.get(url(stack), {"page": "2", "q": "sns"})
    assert response.status_code == 302
    assert response["Location"] == url(stack, "stack_resources") + "?page=2&q=sns"
    assert alice_client.get(url(stack)).status_code == 200


def with_journal(stack, *, minutes_ago: int, size: int = 2048):
    stack.journal_key = stack.key.replace("state.json", "rollback-journal.json")
    stack.journal_etag = '"journal-etag"'
    stack.journal_size = size
    stack.journal_modified = timezone.now() - timedelta(minutes=minutes_ago)
    stack.save()
    return stack


def synced_without_journal(account):
    return make_stack(account, "api", journal_key="")  # "": the sync looked, and there is none


def test_it_shows_a_leftover_rollback_journal_and_the_next_step(alice_client, prod):
    stack = with_journal(web(prod), minutes_ago=180)
    with mock.patch.object(StateBucket, "open", side_effect=AssertionError("no S3 call from the Overview")):
        content = alice_client.get(url(stack)).content.decode()
    notice = content.split('id="journal-notice"')[1].split("</div>")[0]
    assert "Leftover rollback journal</strong>, written 3 hours ago" in notice
    assert "cdkd/web/us-east-1/rollback-journal.json" in notice and "2.0\xa0KB" in notice
    command = "python manage.py cdkd rollback web --account 111111111111 --stack-region us-east-1 --yes"
    assert f'<code id="journal-command">{command}</code>' in notice
    assert "cdkd rollback web --stack-region us-east-1" in notice
    assert 'id="journal-why-not"' not in notice  # nothing stands in the way
    for name in TABS[1:]:
        assert 'id="journal-notice"' not in alice_client.get(url(stack, name)).content.decode()
    assert 'id="journal-notice"' not in alice_client.get(url(synced_without_journal(prod))).content.decode()


def test_it_says_why_the_rollback_cannot_run_now(alice_client, prod):
    stack = with_journal(web(prod), minutes_ago=5)
    make_lock(stack, owner="ci@runner-17:4242")
    notice = alice_client.get(url(stack)).content.decode().split('id="journal-notice"')[1].split("</div>")[0]
    assert "It cannot run now:</strong> The stack is locked by ci@runner-17:4242" in notice
    Stack.objects.filter(pk=stack.pk).update(read_only=True, schema_version=12)
    notice = alice_client.get(url(stack)).content.decode().split('id="journal-notice"')[1].split("</div>")[0]
    assert "Written by a newer cdkd (schema version 12)" in notice


def test_it_weighs_the_journal_on_the_lock_card(alice_client, prod):
    stack = web(prod)
    lock = make_lock(stack, expires_in_ms=3_000_000)
    lock.timestamp_ms = now_ms() - 50 * 60_000
    lock.save()
    with_journal(stack, minutes_ago=40)
    response = alice_client.get(url(stack))
    content = response.content.decode()
    assert response.context["lock_card"].verdict == "likely abandoned"
    assert "A rollback journal was written under this lock 40 minutes ago and left" in content
    assert "Rollback journal: unknown" not in content
    stack.journal_key, stack.journal_modified, stack.journal_size = "", None, None
    stack.save()
    assert "No rollback journal is left over." in alice_client.get(url(stack)).content.decode()


def test_it_reads_the_journal_with_no_query_of_its_own(alice_client, prod, django_assert_max_num_queries):
    plain = web(prod)
    make_lock(plain)
    with CaptureQueriesContext(connection) as ctx:
        alice_client.get(url(plain))
    journaled = with_journal(make_stack(prod, "jobs"), minutes_ago=90)
    make_lock(journaled)
    with django_assert_max_num_queries(len(ctx.captured_queries)):
        assert 'id="journal-notice"' in alice_client.get(url(journaled)).content.decode()
