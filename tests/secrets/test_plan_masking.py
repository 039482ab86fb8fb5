"""An operation's plan on its pages: a reference rewrite resolves values out of the record
(an orphaned resource's attributes), so a secret would be printed there; the pages mask
credential shapes and the values of a rewrite whose path names a secret.

FAKE ENGINE: the plan is stored as `engine.orphan` shapes it; no S3."""

from __future__ import annotations

import pytest
from django.urls import reverse

from engine.operations import Plan
from stacks.models import Operation
from tests.operations_ui.conftest import login

pytestmark = pytest.mark.django_db

URL_PW = "Paym3nts-Db-Passw0rd-2024"
ATTR_PW = "attr-value-s3cr3t-0001"


def test_the_operation_page_masks_secrets_a_rewrite_resolved(client, vera, olivia, web):
    rewrites = [
        {"kind": "GetAtt", "logicalId": "Fn", "path": "Properties.DbUrl", "before": {"Fn::GetAtt": ["Db", "Url"]}},
        {"kind": "GetAtt", "logicalId": "Fn", "path": "Properties.DbPassword", "before": {"Fn::GetAtt": ["Db", "P"]}},
    ]
    rewrites[0]["after"] = f"postgres://payments:{URL_PW}@db:5432/p"
    rewrites[1]["after"] = ATTR_PW
    changes = [f'Fn.Properties.DbUrl: {{"Fn::GetAtt": ["Db", "Url"]}} -> "postgres://payments:{URL_PW}@db:5432/p"']
    plan = Plan("orphan-resources", "web", "us-east-1", '"e"', "orphan Db", changes, [], {"rewrites": rewrites})
    op = Operation.objects.create(
        kind="orphan-resources",
        account=web.account,
        stack_name="web",
        region="us-east-1",
        requested_by=olivia,
        requester_name="olivia",
        params={"resources": ["Db"]},
        plan=plan.as_json(),
        plan_digest=plan.digest,
        plan_etag='"e"',
    )

    content = login(client, vera).get(reverse("operation", args=[op.pk])).content.decode()

    assert URL_PW not in content and ATTR_PW not in content
    assert "postgres://payments:***@db:5432/p" in content.replace("&quot;", '"')
    assert "Fn.Properties.DbPassword" in content  # where stays readable
    op.refresh_from_db()
    assert op.plan["data"]["rewrites"][1]["after"] == ATTR_PW  # the stored plan is not rewritten
