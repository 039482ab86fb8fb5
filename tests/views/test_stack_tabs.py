"""The stack page's tabs: each its own URL, a full page without JavaScript and just the
tab for htmx; console links and copy buttons; the lock card's verdict from the mirror.

alice views prod and dev; bob views dev only."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from stacks.models import DeploymentEvent, DeploymentRun, now_ms
from tests.views.conftest import make_lock, make_stack, record, resource_row

pytestmark = pytest.mark.django_db

TABS = ["stack", "stack_resources", "stack_outputs", "stack_events"]
HTMX_TAB = {"HX-Request": "true", "HX-Target": "stack-tab"}


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
    assert 'id="res-Bucket"' in resources and 'aria-label="Lock"' not in resources
    assert "BucketName" in outputs and 'id="res-Bucket"' not in outputs
    assert 'id="stack-runs"' in events and "BucketName" not in events
    history = url(stack, "stack_history")
    assert f'href="{history}" data-tab="history"' in overview  # History is the history page


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


def test_the_history_page_is_the_history_tab(alice_client, prod):
    from unittest import mock

    from stacks import history

    stack = web(prod)
    with mock.patch.object(history, "list_versions", autospec=True, return_value=[]):
        content = alice_client.get(url(stack, "stack_history")).content.decode()
    assert 'id="stack-tabs"' in content
    assert f'href="{url(stack, "stack_history")}" data-tab="history" aria-current="page"' in content
    assert f'href="{url(stack, "stack_resources")}" data-tab="resources"' in content


def test_a_resource_link_from_before_the_tabs_lands_on_the_resources_tab(alice_client, prod):
    stack = web(prod)
    response = alice_client.get(url(stack), {"page": "2", "q": "sns"})
    assert response.status_code == 302
    assert response["Location"] == url(stack, "stack_resources") + "?page=2&q=sns"
    assert alice_client.get(url(stack)).status_code == 200
