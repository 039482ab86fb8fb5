from __future__ import annotations

import json

import pytest
from django.urls import reverse

from engine.schema import parse_state
from tests.views.conftest import T0, make_lock, make_stack, record, resource_row

pytestmark = pytest.mark.django_db


def url(stack, name: str = "stack", *extra) -> str:
    return reverse(name, args=[stack.account.account_id, stack.region_slug, stack.stack_name, *extra])


def rich_record() -> dict:
    return record(
        "web",
        resources={
            "Bucket": resource_row("AWS::S3::Bucket", "web-bucket", provisionedBy="sdk", deletionPolicy="Retain"),
            "Table": resource_row(
                "AWS::Glue::Table", "analytics|events|v2", provisionedBy="cc-api", dependencies=["Bucket", "Gone"]
            ),
            "Secret": resource_row(
                "AWS::RDS::DBInstance",
                "db-1",
                properties={"MasterUserPassword": "***", "Engine": "postgres"},
                attributes={"Token": "***"},
                noEchoLeaves=[["MasterUserPassword"]],
                noEchoAttributeNames=["Token"],
                observedBaselineRefused=True,
            ),
        },
        outputs={"BucketArn": "arn:aws:s3:::web-bucket", "NameServers": ["ns-1", "ns-2"], "Plain": "x"},
        exportNames=["BucketArn"],
        imports=[{"sourceStack": "net", "sourceRegion": "us-east-1", "exportName": "VpcId"}],
        outputReads=[{"sourceStack": "dns", "sourceRegion": "us-east-1", "outputName": "ZoneId"}],
        skippedOutputs={"Broken": "sha256:abc"},
    )


def test_it_shows_where_the_record_lives_and_what_it_holds(alice_client, prod):
    stack = make_stack(prod, "web", data=rich_record(), etag='"abc123"')
    response = alice_client.get(url(stack))
    content = response.content.decode()
    assert response.status_code == 200
    for text in [
        "cdkd-state-111111111111",
        "cdkd/web/us-east-1/state.json",
        "&quot;abc123&quot;",
        str(T0),
        "2024-03-19 08:00:00",
    ]:
        assert text in content, text


def test_it_shows_resources_with_composite_ids_layers_and_marks(alice_client, prod):
    stack = make_stack(prod, "web", data=rich_record())
    content = alice_client.get(url(stack, "stack_resources")).content.decode()
    assert '<span class="seg">analytics</span>' in content
    assert '<span class="seg">v2</span>' in content
    assert "cc-api" in content and "(sdk, legacy default)" in content
    assert "Retain" in content
    assert 'href="?page=1#res-Bucket"' in content
    assert "Gone?" in content
    assert "masked" in content and "baseline refused" in content
    assert "properties.MasterUserPassword" in content and "attributes.Token" in content


def test_it_shows_outputs_with_json_values_and_exports(alice_client, prod):
    stack = make_stack(prod, "web", data=rich_record())
    response = alice_client.get(url(stack, "stack_outputs"))
    outputs = {o.key: o for o in response.context["outputs"]}
    assert outputs["BucketArn"].export and not outputs["Plain"].export
    assert "[&quot;ns-1&quot;, &quot;ns-2&quot;]" in response.content.decode()


def test_it_says_every_output_is_importable_before_v9(alice_client, prod):
    stack = make_stack(prod, "old", data=record("old", version=8, outputs={"A": "1"}))
    assert "every output key is importable" in alice_client.get(url(stack, "stack_outputs")).content.decode()


def test_it_shows_imports_output_reads_skipped_outputs_and_orphans(alice_client, prod):
    data = rich_record()
    data["orphans"] = [{"logicalId": "OldQueue", "orphanedAt": T0, "state": resource_row("AWS::SQS::Queue", "q-old")}]
    stack = make_stack(prod, "web", data=data)
    outputs = alice_client.get(url(stack, "stack_outputs")).content.decode()
    for text in ["VpcId", "net", "ZoneId", "dns", "Broken", "sha256:abc"]:
        assert text in outputs, text
    resources = alice_client.get(url(stack, "stack_resources")).content.decode()
    for text in ["OldQueue", "q-old"]:
        assert text in resources, text


def test_it_shows_a_live_lock(alice_client, prod):
    stack = make_stack(prod, "web")
    make_lock(stack, owner="carol@ci:99", operation="destroy")
    response = alice_client.get(url(stack))
    assert response.context["lock"].state == "live"
    assert "carol@ci:99" in response.content.decode() and "destroy" in response.content.decode()


def test_it_says_a_lock_without_deadline_counts_as_expired(alice_client, prod):
    stack = make_stack(prod, "web")
    make_lock(stack, expires_in_ms=None)
    response = alice_client.get(url(stack))
    assert response.context["lock"].state == "expired"
    assert "unknown deadline (counts as expired)" in response.content.decode()


def test_it_shows_an_unreadable_lock(alice_client, prod):
    stack = make_stack(prod, "web")
    make_lock(stack, readable=False, error="lock.json is not JSON")
    content = alice_client.get(url(stack)).content.decode()
    assert "unreadable" in content and "lock.json is not JSON" in content


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[]",
        json.dumps(record("bad", resources=[])).encode(),
        json.dumps(record("bad", outputs="oops")).encode(),
        json.dumps(record("bad", resources={"Row": "just a string"})).encode(),
        json.dumps(record("bad", orphans="abc")).encode(),
        json.dumps(record("bad", exportNames="BucketArn")).encode(),
    ],
)
def test_it_shows_a_damaged_record_with_its_defect_messages(alice_client, prod, body):
    stack = make_stack(prod, "bad", body=body)
    response = alice_client.get(url(stack))
    assert response.status_code == 200
    parsed = parse_state(body, key_region="us-east-1")
    assert parsed.defects + parsed.warnings
    content = response.content.decode()
    for defect in parsed.defects + parsed.warnings:
        assert f'data-code="{defect.code}"' in content


def test_it_marks_a_malformed_row(alice_client, prod):
    stack = make_stack(prod, "bad", data=record("bad", resources={"Row": 42, "Ok": resource_row()}))
    content = alice_client.get(url(stack, "stack_resources")).content.decode()
    assert "malformed row" in content


def test_it_says_a_newer_record_is_read_only(alice_client, prod):
    stack = make_stack(prod, "future", data=record("future", version=12))
    assert "Written by a newer cdkd (version 12): read-only here" in alice_client.get(url(stack)).content.decode()


def test_it_warns_about_region_disagreement_and_legacy_keys(alice_client, prod):
    mismatch = make_stack(prod, "moved", data=record("moved", "eu-west-1"))
    assert 'data-code="region-mismatch"' in alice_client.get(url(mismatch)).content.decode()
    legacy = make_stack(prod, "old", None, legacy=True, data=record("old", None, version=1))
    assert legacy.region_slug == "legacy"
    assert 'data-code="legacy-key"' in alice_client.get(url(legacy)).content.decode()


def test_it_links_parent_and_children(alice_client, prod):
    app = make_stack(prod, "app")
    child = make_stack(prod, "app~Db", parent=app, parent_logical_id="Db")
    assert url(child).encode() in alice_client.get(url(app)).content
    assert url(app).encode() in alice_client.get(url(child)).content


def test_it_handles_awkward_stack_names(alice_client, prod):
    stack = make_stack(prod, "we?b #1 %ü")
    assert "%3F" in url(stack) and "%23" in url(stack)
    assert alice_client.get(url(stack)).status_code == 200


def test_it_downloads_the_stored_bytes_verbatim(alice_client, prod):
    body = b'{"version": 11,   "stackName": "web", "resources": {}, "z": 1}\n\n'
    stack = make_stack(prod, "web", body=body)
    response = alice_client.get(url(stack, "stack_download"))
    assert response.content == body
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"].startswith("attachment;")
    assert "web.us-east-1.state.json" in response["Content-Disposition"]


def test_it_downloads_a_damaged_record_too(alice_client, prod):
    stack = make_stack(prod, "bad", body=b"\xff{garbage")
    assert alice_client.get(url(stack, "stack_download")).content == b"\xff{garbage"


def test_it_pretty_prints_the_json(alice_client, prod):
    stack = make_stack(prod, "web", body=b'{"version":11,"stackName":"web","resources":{}}')
    content = alice_client.get(url(stack, "stack_json")).content.decode()
    assert "  &quot;stackName&quot;: &quot;web&quot;" in content


def test_it_shows_a_non_json_body_as_text(alice_client, prod):
    stack = make_stack(prod, "bad", body=b"{not json")
    content = alice_client.get(url(stack, "stack_json")).content.decode()
    assert "{not json" in content and "not JSON" in content


def test_it_serves_one_resource_as_a_partial_or_a_page(alice_client, prod):
    stack = make_stack(prod, "web", data=rich_record())
    partial = alice_client.get(url(stack, "stack_resource", "Secret"), headers={"HX-Request": "true"})
    assert b"<html" not in partial.content
    assert b"&quot;Engine&quot;: &quot;postgres&quot;" in partial.content
    page = alice_client.get(url(stack, "stack_resource", "Secret"))
    assert b"<html" in page.content
    assert alice_client.get(url(stack, "stack_resource", "Nope")).status_code == 404


def big_stack(account, n: int = 2000):
    rows = {
        f"Res{i:04}": resource_row("AWS::SNS::Topic", f"arn:topic:{i}", dependencies=[f"Res{(i + 1) % n:04}"])
        for i in range(n)
    }
    return make_stack(account, "big", data=record("big", resources=rows))


def test_it_paginates_a_2000_resource_stack_and_lazy_loads_details(alice_client, prod, django_assert_max_num_queries):
    stack = big_stack(prod)
    # 8, + the nav's "awaiting my approval" count, the role check for the operation buttons,
    # the stack's secret findings count and the flagged paths to mask
    with django_assert_max_num_queries(12):
        response = alice_client.get(url(stack, "stack_resources"), {"page": 2})
    assert len(response.context["rows"]) == 200
    assert response.context["rows"][0].logical_id == "Res0200"
    content = response.content.decode()
    assert 'hx-trigger="toggle once"' in content
    assert "&quot;properties&quot;" not in content
    # The last row of page 1 links to the first row of page 2.
    assert 'href="?page=2#res-Res0200"' in alice_client.get(url(stack, "stack_resources")).content.decode()


def test_it_filters_resources_and_answers_htmx_with_the_resources_partial(alice_client, prod):
    stack = big_stack(prod, 300)
    response = alice_client.get(
        url(stack, "stack_resources"), {"q": "topic:29"}, headers={"HX-Request": "true", "HX-Target": "resources"}
    )
    assert b"<html" not in response.content
    content = response.content.decode()
    assert content.count('<tr id="res-') == 11
    assert 'id="res-Res0029"' in content and 'id="res-Res0299"' in content and 'id="res-Res0030"' not in content


def test_it_keeps_the_query_count_flat_for_the_stack_page(alice_client, prod, django_assert_max_num_queries):
    small = make_stack(prod, "small", data=rich_record())
    make_lock(small)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        alice_client.get(url(small))
    stack = big_stack(prod, 500)
    make_lock(stack)
    for i in range(5):
        make_stack(prod, f"big~C{i}", parent=stack)
    with django_assert_max_num_queries(len(ctx.captured_queries) + 1):  # + the parent lookup of a child
        alice_client.get(url(stack))
