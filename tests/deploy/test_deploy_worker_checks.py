"""The web path's worker, on moto: the file assets of an approved deploy published before the
lock (HEAD, then skip what exists), a Docker image asset refused at plan time, the region
re-checked against the record the worker re-reads, and the template parameters encrypted at
rest in the operation row while the worker still deploys with their values.

Personas as in test_deploy_operation: olivia an operator, arthur an approver on prod."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from stacks.models import AuditEvent, Operation, OperationStatus
from tests.deploy.test_deploy_operation import (
    A1,
    BUCKET,
    KEY,
    RECORD,
    REGION,
    plan_upload,
    request_deploy,
    sqs,
    work,
    world,  # noqa: F401 - the fixture
)
from tests.deploy.zips import GOLDEN, files_of, zip_entries

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("assembly_storage"),
]

ASSETS = f"cdk-hnb659fds-assets-{A1}-{REGION}"
MANIFEST = "GoldenCdkStack.assets.json"
TEMPLATE = "GoldenCdkStack.template.json"
DEST = {"bucketName": "cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}", "region": REGION}


def app(*, docker: bool = False, template=None) -> bytes:
    """The golden cdk.out with two file assets (a zipped directory and a file) and, with
    `docker`, a Docker image asset."""
    files = files_of(GOLDEN)
    manifest = json.loads(files[MANIFEST])
    manifest["files"]["aaa"] = {
        "source": {"path": "asset.aaa", "packaging": "zip"},
        "destinations": {"d": dict(DEST, objectKey="aaa.zip")},
    }
    manifest["files"]["bbb"] = {
        "source": {"path": "data.txt", "packaging": "file"},
        "destinations": {"d": dict(DEST, objectKey="bbb.txt")},
    }
    files["asset.aaa/index.py"] = b"def handler(event, context):\n    return 1\n"
    files["data.txt"] = b"fresh bytes"
    if docker:
        manifest["dockerImages"] = {
            "img": {
                "source": {"directory": "asset.img"},
                "destinations": {"d": {"repositoryName": "cdk-hnb659fds-container-assets", "imageTag": "img"}},
            }
        }
        files["asset.img/Dockerfile"] = b"FROM scratch\n"
    files[MANIFEST] = json.dumps(manifest).encode()
    if template is not None:
        doc = json.loads(files[TEMPLATE])
        template(doc)
        files[TEMPLATE] = json.dumps(doc).encode()
    return zip_entries(files)


def approve(world, op: Operation) -> None:  # noqa: F811
    response = world["arthur"].post(reverse("operation_decide", args=[op.pk]), {"decision": "approve"})
    assert response.status_code == 302


def test_the_worker_publishes_file_assets_before_the_lock_and_skips_what_exists(world, queue):  # noqa: F811
    aws = world["aws"]
    aws.make_bucket(A1, ASSETS, versioning=False)
    aws.put(A1, ASSETS, "bbb.txt", b"published by cdkd earlier")  # already there: HEAD, then skip
    plan = plan_upload(world, app())
    request_deploy(world, plan)
    op = Operation.objects.get()
    assert op.plan["data"]["fileAssets"] is True
    approve(world, op)

    seen: list[tuple[str, str]] = []
    aws.proxy.add_hook(lambda api, method, path, headers: seen.append((api, path)))  # returns None: forwards
    work(queue)
    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, (op.error, op.log)
    with zipfile.ZipFile(io.BytesIO(aws.get(A1, ASSETS, "aaa.zip"))) as zf:
        assert zf.namelist() == ["index.py"] and zf.read("index.py").startswith(b"def handler")
    assert aws.get(A1, ASSETS, "bbb.txt") == b"published by cdkd earlier"  # not overwritten
    puts = [path for api, path in seen if api == "PutObject"]
    assert [p for p in puts if ASSETS in p] == [f"/{ASSETS}/aaa.zip"]  # only the missing one
    heads = [path for api, path in seen if api == "HeadObject" and ASSETS in path]
    assert sorted(heads) == [f"/{ASSETS}/aaa.zip", f"/{ASSETS}/bbb.txt"]
    first_lock = next(i for i, (api, path) in enumerate(seen) if api == "PutObject" and path.endswith("lock.json"))
    last_asset = max(i for i, (_api, path) in enumerate(seen) if ASSETS in path)
    assert last_asset < first_lock  # published before the stack's lock is taken
    assert any("file assets: 1 uploaded, 1 already there" in line["message"] for line in op.log)
    assert sorted(json.loads(aws.get(A1, BUCKET, KEY))["resources"]) == sorted(RECORD["resources"])


def test_a_docker_image_asset_is_a_blocking_reason_at_plan_time(world, queue):  # noqa: F811
    plan = plan_upload(world, app(docker=True))
    assert plan.blocking_count
    page = world["olivia"].get(reverse("deploy_plan", args=[plan.pk])).content.decode()
    assert 'id="plan-blocking"' in page and "Docker image assets are not supported" in page
    assert 'id="request-deploy"' not in page
    response = request_deploy(world, plan)
    assert response.status_code == 409 and b"Docker image assets are not supported" in response.content
    assert not Operation.objects.exists()


def test_the_worker_refuses_a_record_whose_region_disagrees_with_the_plan(world, queue):  # noqa: F811
    aws = world["aws"]
    aws.put(A1, BUCKET, KEY, RECORD)
    plan = plan_upload(world, app(template=lambda t: t["Resources"]["Queue4A7E3555"]["Properties"].update(
        VisibilityTimeout=60)))  # fmt: skip
    request_deploy(world, plan)
    op = Operation.objects.get()
    approve_later = dict(RECORD, region="eu-west-1")  # a hand edit after the request
    aws.put(A1, BUCKET, KEY, approve_later)
    approve(world, op)
    aws.reset_counts()
    work(queue)
    op.refresh_from_db()
    assert op.status == OperationStatus.REFUSED
    assert f"{KEY} is stored under region us-east-1 but its body says region eu-west-1" in op.error, op.error
    assert "correct the record's region field" in op.error
    assert aws.requests.get("PutObject", 0) == 0  # no lock, no asset, no record write
    assert json.loads(aws.get(A1, BUCKET, KEY)) == approve_later
    assert sqs(world).list_queues().get("QueueUrls", []) == []


def test_a_deploy_over_a_record_of_another_region_cannot_be_requested(world, queue):  # noqa: F811
    world["aws"].put(A1, BUCKET, KEY, dict(RECORD, region="eu-west-1"))
    plan = plan_upload(world, app())
    response = request_deploy(world, plan)
    assert response.status_code == 409
    assert b"its body says region eu-west-1" in response.content
    assert not Operation.objects.exists()


SECRET = "tok-plain-8f3a61"


def with_token_parameter(template: dict) -> None:
    template["Parameters"]["ApiToken"] = {"Type": "String"}
    template["Resources"]["Param165332EC"]["Properties"]["Value"] = {"Ref": "ApiToken"}


def test_template_parameters_are_encrypted_in_the_row_and_reach_the_worker(world, queue):  # noqa: F811
    from django.core.files.uploadedfile import SimpleUploadedFile

    world["aws"].make_bucket(A1, ASSETS, versioning=False)
    url = reverse("account_plan_new", args=[A1])
    upload = SimpleUploadedFile("cdk.out.zip", app(template=with_token_parameter), content_type="application/zip")
    form = {"assembly_file": upload, "stack": "GoldenCdkStack", "parameters": f"ApiToken={SECRET}"}
    assert world["olivia"].post(url, form).status_code == 302
    from stacks.models import DeployPlan

    request_deploy(world, DeployPlan.objects.get())
    op = Operation.objects.get()
    assert "parameters" not in op.params and op.secret_params == {"parameters": {"ApiToken": SECRET}}
    with connection.cursor() as cursor:
        cursor.execute("SELECT params::text, secret_params FROM stacks_operation WHERE id = %s", [op.pk])
        params_text, sealed = cursor.fetchone()
    assert SECRET not in params_text and SECRET.encode() not in bytes(sealed)
    assert b"ApiToken" not in bytes(sealed)  # a Fernet token, not JSON
    page = world["arthur"].get(reverse("operation", args=[op.pk])).content.decode()
    assert "ApiToken" in page and SECRET not in page

    approve(world, op)
    work(queue)
    op.refresh_from_db()
    assert op.status == OperationStatus.SUCCEEDED, (op.error, op.log)
    name = json.loads(world["aws"].get(A1, BUCKET, KEY))["resources"]["Param165332EC"]["physicalId"]
    ssm = world["aws"].account_session(A1).client("ssm", region_name=REGION, endpoint_url=world["aws"].moto.url)
    assert ssm.get_parameter(Name=name)["Parameter"]["Value"] == SECRET  # the worker had the value
    for event in AuditEvent.objects.filter(operation_id=op.pk):
        assert SECRET not in json.dumps(event.details, default=str)
    with connection.cursor() as cursor:
        cursor.execute("SELECT params::text, plan::text, result::text, log::text FROM stacks_operation")
        assert all(SECRET not in column for row in cursor.fetchall() for column in row)


def test_the_migration_moves_existing_deploy_parameters_into_the_encrypted_column():
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes("stacks")
    before, target = [("stacks", "0015_stack_journal")], [("stacks", "0016_encrypt_operation_parameters")]
    try:
        executor.migrate(before)
        old = MigrationExecutor(connection).loader.project_state(before).apps
        account = old.get_model("stacks", "Account").objects.create(account_id=A1)
        Op = old.get_model("stacks", "Operation")
        params = {"account": A1, "parameters": {"ApiToken": SECRET}, "concurrency": 2}
        deploy = Op.objects.create(kind="deploy", account=account, stack_name="S", plan_digest="d", params=params)
        other = Op.objects.create(kind="orphan", account=account, stack_name="S", plan_digest="d", params={"x": 1})

        MigrationExecutor(connection).migrate(target)
        moved = Operation.objects.get(pk=deploy.pk)
        assert moved.params == {"account": A1, "concurrency": 2}
        assert moved.secret_params == {"parameters": {"ApiToken": SECRET}} and moved.all_params == params
        assert Operation.objects.get(pk=other.pk).params == {"x": 1}
        with connection.cursor() as cursor:
            cursor.execute("SELECT params::text, secret_params FROM stacks_operation WHERE id = %s", [deploy.pk])
            text, sealed = cursor.fetchone()
        assert SECRET not in text and SECRET.encode() not in bytes(sealed)

        MigrationExecutor(connection).migrate(before)
        old = MigrationExecutor(connection).loader.project_state(before).apps
        assert old.get_model("stacks", "Operation").objects.get(pk=deploy.pk).params == params
    finally:
        MigrationExecutor(connection).migrate(leaves)
