"""The secrets pages, the stack page's Secrets section and Destroy button, and the destroy
and scrub confirmation pages, per role.

FAKE ENGINE: no S3 here. Findings are rows made directly; `compute_plan` returns plans
shaped like engine.destroy's and engine.scrub's. The moto tests beside this one run the
real scan and scrub."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.urls import reverse

from engine.operations import Plan
from stacks import operations
from stacks.models import Operation, ScanRun, SecretFinding, SyncStatus
from tests.operations_ui.conftest import A, login

pytestmark = pytest.mark.django_db

STATE = "cdkd/web/us-east-1/state.json"


def finding(
    account,
    stack="web",
    *,
    version=None,
    key=STATE,
    kind="record",
    source="Secrets Manager secret prod/db, key password",
    path=None,
    whole=True,
) -> SecretFinding:
    return SecretFinding.objects.create(
        account=account,
        stack_name=stack,
        region="us-east-1",
        key=key,
        key_kind=kind,
        version_id=version,
        path=path or ["outputs", "DbPassword"],
        source=source,
        whole=whole,
    )


@pytest.fixture
def findings(prod, dev, web):
    return [
        finding(prod),
        finding(prod, version="v-old"),
        finding(
            prod,
            key="cdkd/_index/us-east-1/exports.json",
            kind="exports-index",
            source="SSM SecureString parameter /prod/api",
            path=["exports", "X", "value"],
            whole=False,
        ),
        finding(prod, source="credential shape: PEM private key", path=["resources", "Fn", "properties", "Key"]),
        finding(dev, stack="dev-secret-stack", key="cdkd/dev-secret-stack/us-east-1/state.json"),
    ]


def test_a_viewer_reads_the_findings_of_their_accounts_only(client, vera, findings):
    response = login(client, vera).get(reverse("secrets"))
    page = response.content.decode()
    assert response.status_code == 200
    assert response.context["page"].paginator.count == 4
    assert "dev-secret-stack" not in page
    assert "outputs.DbPassword" in page and "Secrets Manager secret prod/db, key password" in page
    assert reverse("stack", args=[A, "us-east-1", "web"]) in page
    assert reverse("stack_version", args=[A, "us-east-1", "web", "v-old"]) in page  # the history version
    assert "embedded" in page
    assert "Scan now" not in page  # a viewer cannot scan


def test_an_outsider_sees_no_finding_of_an_account_they_have_no_role_on(client, otto, findings):
    response = login(client, otto).get(reverse("secrets"))
    assert response.context["page"].paginator.count == 1
    assert STATE.encode() not in response.content and b"dev-secret-stack" in response.content
    assert login(client, otto).get(reverse("secrets"), {"account": A}).status_code == 400


@pytest.mark.parametrize(
    ("query", "count"),
    [
        ({"version": "current"}, 3),
        ({"version": "history"}, 1),
        ({"source": "ssm"}, 1),
        ({"source": "shape"}, 1),
        ({"source": "secretsmanager"}, 2),
        ({"key_kind": "exports-index"}, 1),
        ({"key_kind": "journal"}, 0),
        ({"stack": "web", "region": "us-east-1"}, 4),
        ({"stack": "nope"}, 0),
        ({"account": A}, 4),
    ],
)
def test_it_filters_findings(client, ada, findings, query, count):
    response = login(client, ada).get(reverse("secrets"), query)
    assert response.status_code == 200
    assert response.context["page"].paginator.count == count


def test_it_paginates_and_serves_the_table_to_htmx(client, ada, prod, settings):
    settings.CDKD_PAGE_SIZE = 2
    for i in range(5):
        finding(prod, path=["outputs", f"O{i}"])
    login(client, ada)
    response = client.get(reverse("secrets"), {"page": 3}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert b"Page 3 of 3" in response.content and response.content.count(b"outputs.O") == 1
    assert b"<h1>" not in response.content and b'id="findings-table"' in response.content


def test_it_exports_csv_and_json_in_the_clis_shape(client, vera, findings):
    login(client, vera)
    data = client.get(reverse("secrets"), {"format": "json", "version": "history"}).json()
    assert data == {
        "findings": [
            {
                "account": A,
                "stackName": "web",
                "region": "us-east-1",
                "key": STATE,
                "versionId": "v-old",
                "path": ["outputs", "DbPassword"],
                "source": "Secrets Manager secret prod/db, key password",
                "whole": True,
            }
        ]
    }
    response = client.get(reverse("secrets"), {"format": "csv"})
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == ["account", "stackName", "region", "key", "versionId", "path", "source", "whole"]
    assert len(rows) == 5 and "attachment" in response["Content-Disposition"]


def test_a_viewer_cannot_scan_an_outsider_gets_404_an_operator_queues_one(client, vera, olivia, otto, prod):
    assert login(client, vera).post(reverse("scan"), {"account": A}).status_code == 403
    assert login(client, vera).post(reverse("scan"), {}).status_code == 403
    assert login(client, otto).post(reverse("scan"), {"account": A}).status_code == 404
    assert not ScanRun.objects.exists()
    response = login(client, olivia).post(reverse("scan"), {"account": A})
    run = ScanRun.objects.get()
    assert response.status_code == 302 and response.url == reverse("scan_status", args=[run.pk])
    assert run.account_ids == [prod.pk] and run.stacks == [] and run.history and run.requested_by == olivia


def test_an_operator_scans_one_stack_from_htmx_and_watches_it(client, olivia, web):
    login(client, olivia)
    response = client.post(
        reverse("scan"),
        {"account": A, "stack": "web", "region": "us-east-1", "current_only": "on"},
        headers={"HX-Request": "true"},
    )
    run = ScanRun.objects.get()
    assert response.status_code == 200 and f'id="scan-run-{run.pk}"'.encode() in response.content
    assert run.stacks == ["web"] and run.region == "us-east-1" and not run.history
    assert client.post(reverse("scan"), {"account": A, "stack": "nope"}).status_code == 404
    assert client.post(reverse("scan"), {"stack": "web"}).status_code == 400
    polling = client.get(reverse("scan_status", args=[run.pk]), headers={"HX-Request": "true"})
    assert polling.status_code == 200 and b"every 1s" in polling.content
    ScanRun.objects.filter(pk=run.pk).update(status=SyncStatus.SUCCEEDED, finding_count=2)
    done = client.get(reverse("scan_status", args=[run.pk]), headers={"HX-Request": "true"})
    assert done.status_code == 286 and b"Rotate every secret" in done.content


def test_the_stack_page_shows_the_stacks_findings_and_offers_scrub_and_destroy_to_operators(
    client, vera, olivia, findings
):
    url = reverse("stack", args=[A, "us-east-1", "web"])
    page = login(client, olivia).get(url).content.decode()
    assert "3 in the current record, 1 in history" in page
    assert 'id="scrub-button"' in page and 'id="destroy-button"' in page and "Scan this stack" in page
    assert reverse("operation_new", args=[A, "us-east-1", "web", "scrub"]) in page
    assert reverse("operation_new", args=[A, "us-east-1", "web", "destroy"]) in page
    page = login(client, vera).get(url).content.decode()
    assert "3 in the current record" in page
    assert 'id="scrub-button"' not in page and 'id="destroy-button"' not in page and "Scan this stack" not in page


# --- the destroy and scrub confirmation pages --------------------------------------------


def destroy_plan(stack: str, region: str | None, params: dict) -> Plan:
    child = {
        "stack": "web~Nested",
        "order": ["Inner"],
        "rows": {
            "Inner": {
                "action": "delete",
                "resourceType": "AWS::SNS::Topic",
                "physicalId": "arn:topic",
                "deletionPolicy": None,
            }
        },
    }
    rows: dict[str, Any] = {
        "Fn": {
            "action": "delete",
            "resourceType": "AWS::Lambda::Function",
            "physicalId": "fn-web",
            "deletionPolicy": None,
        },
        "Nested": {
            "action": "nested",
            "resourceType": "AWS::CloudFormation::Stack",
            "physicalId": "arn:stack",
            "childStack": "web~Nested",
            "child": child,
        },
        "Logs": {
            "action": "retain",
            "resourceType": "AWS::Logs::LogGroup",
            "physicalId": "/logs",
            "deletionPolicy": "Retain",
        },
        "Odd": {"action": "skip", "resourceType": "AWS::SQS::Queue", "physicalId": None, "reason": "no physical id"},
        "Db": {
            "action": "snapshot",
            "resourceType": "AWS::RDS::DBInstance",
            "physicalId": "db-1",
            "deletionPolicy": "Snapshot",
        },
    }
    data = {
        "stack": stack,
        "order": ["Fn", "Nested", "Logs", "Odd", "Db"],
        "rows": rows,
        "concurrency": params.get("concurrency", 8),
    }
    return Plan("destroy", stack, region, '"etag-1"', f"Destroy {stack}", ["delete Fn", "..."], [], data)


def scrub_plan(stack: str, region: str | None, params: dict) -> Plan:
    rewrites = [
        {
            "path": ["outputs", "DbPassword"],
            "to": "{{resolve:secretsmanager:arn:db:SecretString:password::}}",
            "source": "Secrets Manager secret prod/db, key password",
            "whole": True,
        },
        {
            "path": ["resources", "Fn", "properties", "Url"],
            "to": "***",
            "source": "SSM SecureString parameter /prod/api",
            "whole": False,
        },
    ]
    data = {
        "key": STATE,
        "rewrites": rewrites,
        "purge_history": bool(params.get("purge_history")),
        "purge": [STATE] if params.get("purge_history") else [],
    }
    return Plan("scrub", stack, region, '"etag-1"', "Scrub 2 value(s). ROTATE every secret", ["..."], [], data)


@pytest.fixture
def fake_plans(monkeypatch):
    calls: list[tuple] = []

    def compute_plan(account, kind, stack, region, params, person):
        calls.append((kind, params))
        return (destroy_plan if kind == "destroy" else scrub_plan)(stack, region, params)

    monkeypatch.setattr(operations, "compute_plan", compute_plan)
    return calls


def new_url(kind: str) -> str:
    return reverse("operation_new", args=[A, "us-east-1", "web", kind])


def test_destroy_shows_every_resources_action_in_order_with_nested_children(client, olivia, web, fake_plans):
    response = login(client, olivia).get(new_url("destroy"), {"concurrency": 4})
    page = response.content.decode()
    assert response.status_code == 200 and fake_plans == [("destroy", {"concurrency": 4})]
    rows = [r["logical_id"] for r in response.context["destroy_rows"]]
    assert rows == ["Fn", "Nested", "Inner", "Logs", "Odd", "Db"]
    assert [r["depth"] for r in response.context["destroy_rows"]] == [0, 0, 1, 0, 0, 0]
    for action in ("delete", "nested", "retain", "skip", "snapshot"):
        assert f'data-action="{action}"' in page
    assert "no physical id" in page and "DeletionPolicy Retain" in page and "web~Nested" in page
    assert 'name="confirm_name"' in page and 'name="concurrency" value="4"' in page
    assert "deletes the stack" in page


def test_destroy_needs_the_stack_name_typed(client, olivia, web, fake_plans):
    login(client, olivia)
    digest = destroy_plan("web", "us-east-1", {"concurrency": 4}).digest
    for typed in ("", "Web", "web2"):
        response = client.post(new_url("destroy"), {"concurrency": 4, "plan_digest": digest, "confirm_name": typed})
        assert response.status_code == 400 and b"Type the stack" in response.content
        assert b'id="plan-destroy"' in response.content  # the plan is shown again
    assert not Operation.objects.exists()
    response = client.post(new_url("destroy"), {"concurrency": 4, "plan_digest": digest, "confirm_name": "web"})
    op = Operation.objects.get()
    assert response.status_code == 302 and op.kind == "destroy" and op.params == {"concurrency": 4}
    assert client.post(new_url("destroy"), {"concurrency": 0, "confirm_name": "web"}).status_code == 400


def test_a_viewer_cannot_reach_destroy_or_scrub_and_an_outsider_gets_404(client, vera, otto, web, fake_plans):
    for kind in ("destroy", "scrub"):
        assert login(client, vera).get(new_url(kind)).status_code == 403
        assert login(client, vera).post(new_url(kind), {"confirm_name": "web"}).status_code == 403
        assert login(client, otto).get(new_url(kind)).status_code == 404
    assert fake_plans == [] and not Operation.objects.exists()


def test_scrub_shows_changes_by_path_says_rotate_and_confirms_the_purge_separately(client, olivia, web, fake_plans):
    login(client, olivia)
    page = client.get(new_url("scrub")).content.decode()
    assert 'id="plan-scrub"' in page and "outputs.DbPassword" in page and "resources.Fn.properties.Url" in page
    assert "Rotate every secret" in page and 'name="confirm_purge"' not in page
    assert 'id="plan-rewrites"' not in page
    page = client.get(new_url("scrub"), {"purge_history": "on"}).content.decode()
    assert 'name="confirm_purge"' in page and 'name="purge_history" value="on"' in page
    digest = scrub_plan("web", "us-east-1", {"purge_history": True}).digest
    refused = client.post(new_url("scrub"), {"purge_history": "on", "plan_digest": digest})
    assert refused.status_code == 400 and not Operation.objects.exists()
    client.post(new_url("scrub"), {"purge_history": "on", "confirm_purge": "on", "plan_digest": digest})
    op = Operation.objects.get()
    assert op.params == {"purge_history": True}
    assert "Rotate every secret" in client.get(reverse("operation", args=[op.pk])).content.decode()
    # without purge, no second confirmation is asked
    response = client.post(new_url("scrub"), {"plan_digest": scrub_plan("web", "us-east-1", {}).digest})
    assert response.status_code == 302 and Operation.objects.count() == 2


def test_it_masks_flagged_values_on_every_page_and_the_download_and_reveals_only_to_admins(client, prod, vera, ada):
    from tests.views.conftest import make_stack, record, resource_row

    data = record(
        "vault",
        resources={
            "Db": resource_row("AWS::RDS::DBInstance", "db-1", properties={"MasterUserPassword": "hunter2-s3cr3t"})
        },
        outputs={"Conn": "postgres://app:hunter2-s3cr3t@db"},
    )
    stack = make_stack(prod, "vault", data=data)
    finding(prod, "vault", key=stack.key, path=["resources", "Db", "properties", "MasterUserPassword"])
    finding(prod, "vault", key=stack.key, path=["outputs", "Conn"], whole=False)
    kw = {"account_id": prod.account_id, "region_slug": "us-east-1", "stack_name": "vault"}
    login(client, vera)

    pages = [reverse(name, kwargs=kw) for name in ("stack", "stack_json")]
    pages.append(reverse("stack_resource", kwargs={**kw, "logical_id": "Db"}))
    for url in pages:
        body = client.get(url).content.decode()
        assert "hunter2-s3cr3t" not in body, url
    assert "***" in client.get(reverse("stack_json", kwargs=kw)).content.decode()
    assert b"hunter2-s3cr3t" not in client.get(reverse("stack_download", kwargs=kw)).content
    assert client.post(reverse("stack_reveal", kwargs=kw)).status_code == 403  # a viewer has no reveal right

    login(client, ada)  # an admin has it by role
    revealed = client.post(reverse("stack_reveal", kwargs=kw))
    assert revealed.status_code == 200 and revealed.content == bytes(stack.body)  # the stored bytes, verbatim


def test_it_shows_the_last_scan_of_an_account_scanned_with_others(client, prod, vera):
    from django.utils import timezone

    run = ScanRun.objects.create(
        account_ids=[prod.pk], stacks=[], status=SyncStatus.SUCCEEDED, finished_at=timezone.now()
    )  # "scan every account I operate": no single account
    login(client, vera)

    rows = client.get(reverse("secrets")).context["accounts"]

    assert [(a.account_id, last) for a, _count, last, _can in rows] == [(prod.account_id, run)]
