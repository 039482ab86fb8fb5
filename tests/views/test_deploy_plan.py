"""Plan a deploy from the browser: who may plan and read, what an upload is refused for,
the plan page, and the notice when the record changed since the plan.

Personas on prod (111111111111): olivia is an operator, vera a viewer; otto holds a role on
dev only (an outsider to prod). The tests that compute a plan read the record cdkd 0.284.40
wrote from a moto server (one GET); the refusals and the page tests never reach S3.
"""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from engine.deploy.assembly import load_zip, read_assembly
from stacks import deployplan
from stacks.models import Assembly, DeployPlan, Membership, Role
from tests.deploy.zips import GOLDEN, GOLDEN_CHANGED, NESTED, SAMPLE, files_of, with_second_stack, zip_dir, zip_entries
from tests.support.fixtures import role_arn
from tests.views.conftest import make_account, make_stack, make_user

A = "111111111111"
B = "222222222222"
BUCKET = f"cdkd-state-{A}"
KEY = "cdkd/GoldenCdkStack/us-east-1/state.json"
RECORD = json.loads((SAMPLE / "state.json").read_bytes())


@pytest.fixture(autouse=True)
def _assembly_storage(settings, tmp_path):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.STORAGES = {
        **settings.STORAGES,
        "assemblies": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "assemblies")},
        },
    }
    return tmp_path / "assemblies"


@pytest.fixture
def prod(db):
    return make_account(A, "prod", role_arn=role_arn(A))


@pytest.fixture
def dev(db):
    return make_account(B, "dev")


@pytest.fixture
def golden(prod):
    """The mirror of the record cdkd wrote (its ETag set by the tests that need S3's)."""
    return make_stack(prod, "GoldenCdkStack", data=RECORD, etag='"mirror-etag"')


def person(name: str, account, role: str):
    user = make_user(name)
    Membership.objects.create(user=user, account=account, role=role)
    return user


@pytest.fixture
def olivia(prod):
    return person("olivia", prod, Role.OPERATOR)


@pytest.fixture
def vera(prod):
    return person("vera", prod, Role.VIEWER)


@pytest.fixture
def otto(dev):
    return person("otto", dev, Role.ADMIN)


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def upload(data: bytes, name: str = "cdk.out.zip") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/zip")


def stack_plan_url() -> str:
    return reverse("stack_plan_new", args=[A, "us-east-1", "GoldenCdkStack"])


def saved_plan(account, *, etag: str = '"mirror-etag"', document: dict | None = None) -> DeployPlan:
    asm = read_assembly(load_zip(zip_dir(GOLDEN)))
    row = deployplan.store_assembly(asm, user=None, name="cdk.out.zip")
    doc = document or {
        "stack": "GoldenCdkStack",
        "region": "us-east-1",
        "changes": [],
        "outputChanges": [],
        "children": [],
        "plan": {"stateBucket": BUCKET, "stateKey": KEY, "blocking": [], "warnings": [], "digest": "d" * 64},
    }
    return DeployPlan.objects.create(
        account=account,
        stack_name="GoldenCdkStack",
        region="us-east-1",
        assembly=row,
        document=doc,
        digest="d" * 64,
        state_key=KEY,
        state_etag=etag,
    )


# --- computing a plan against the live record (moto) -------------------------------------------


@pytest.fixture
def world(aws, prod):
    aws.make_bucket(A, BUCKET)
    aws.put(A, BUCKET, KEY, (SAMPLE / "state.json").read_bytes())
    aws.put(A, BUCKET, "cdkd/_index/us-east-1/exports.json", (SAMPLE / "exports.json").read_bytes())
    aws.reset_counts()
    return aws


@pytest.mark.integration
def test_it_plans_an_uploaded_zip_from_the_stack_page_and_shows_the_replacement(
    world, golden, olivia, _assembly_storage
):
    client = logged_in(olivia)
    response = client.post(stack_plan_url(), {"assembly_file": upload(zip_dir(GOLDEN_CHANGED, prefix="cdk.out/"))})
    plan = DeployPlan.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("deploy_plan", args=[plan.pk])
    # one GET of the record; no ImportValue, so no exports index
    assert world.requests["GetObject"] == 1
    etag = world.etag(A, BUCKET, KEY)
    assert plan.state_etag == etag and plan.state_key == KEY and plan.created_by == olivia
    expected = read_assembly(files_of(GOLDEN_CHANGED))
    assert plan.assembly.digest == expected.digest == plan.document["plan"]["assemblyDigest"]
    assert plan.digest == plan.document["plan"]["digest"] and plan.has_changes and plan.blocking_count == 0
    # kept by content digest as a canonical zip that reads back to the same assembly
    stored = (_assembly_storage / deployplan.storage_name(expected.digest)).read_bytes()
    assert read_assembly(load_zip(stored)).digest == expected.digest
    assert Assembly.objects.get().stack_names == ["GoldenCdkStack"]

    page = client.get(response["Location"])
    html = page.content.decode()
    assert page.status_code == 200
    assert 'id="change-0-topicbfc7af6e" data-action="replace"' in html
    assert "requires replacement" in html and "golden-renamed" in html
    # replacements first: groups holding one (Queue: the subscription; Topic) before the
    # parameter's in-place update, and inside a group the replacement before the updates
    order = [
        html.index(f"change-0-{lid.lower()}")
        for lid in ("QueueGoldenCdkStackTopic1060F492172D006E", "Queue4A7E3555", "TopicBFC7AF6E", "Param165332EC")
    ]
    assert order == sorted(order)
    assert plan.digest in html
    # the mirror holds another ETag than S3's: the page says the record changed
    assert "the record has changed since this plan" in html.lower()


@pytest.mark.integration
def test_it_says_in_one_line_that_nothing_changes(world, golden, olivia):
    golden.etag = world.etag(A, BUCKET, KEY)
    golden.save()
    client = logged_in(olivia)
    response = client.post(stack_plan_url(), {"assembly_file": upload(zip_dir(GOLDEN))})
    page = client.get(response["Location"])
    html = page.content.decode()
    assert "Stack GoldenCdkStack (us-east-1): no changes." in html
    assert 'class="plan-change' not in html and 'id="plan-stale"' not in html


@pytest.mark.integration
def test_it_reuses_a_stored_assembly_and_asks_which_stack_on_the_account_page(world, olivia):
    client = logged_in(olivia)
    url = reverse("account_plan_new", args=[A])
    first = client.post(url, {"assembly_file": upload(with_second_stack(GOLDEN, A))})
    assert first.status_code == 200 and b"This assembly holds 2 stacks" in first.content
    digest = Assembly.objects.get().digest
    second = client.post(url, {"assembly": digest, "stack": "Other"})
    plan = DeployPlan.objects.get()
    assert second.status_code == 302 and plan.stack_name == "Other" and plan.state_etag == ""
    assert plan.document["plan"]["stateKey"] == "cdkd/Other/us-east-1/state.json"
    assert Assembly.objects.count() == 1


# --- the notice, the page, masking (no S3) ------------------------------------------------------


def test_it_says_the_record_changed_since_the_plan_only_when_the_mirror_etag_differs(golden, vera):
    plan = saved_plan(golden.account, etag='"mirror-etag"')
    client = logged_in(vera)
    html = client.get(reverse("deploy_plan", args=[plan.pk])).content.decode()
    assert 'id="plan-stale"' not in html
    assert "Stack GoldenCdkStack (us-east-1): no changes." in html
    golden.etag = '"after-a-deploy"'
    golden.save()
    html = client.get(reverse("deploy_plan", args=[plan.pk])).content.decode()
    assert 'id="plan-stale"' in html and "The record has changed since this plan" in html
    assert '"after-a-deploy"' in html or "&quot;after-a-deploy&quot;" in html


def test_it_says_a_record_appeared_for_a_plan_of_a_new_stack(prod, vera):
    plan = saved_plan(prod, etag="")
    client = logged_in(vera)
    assert b'id="plan-stale"' not in client.get(reverse("deploy_plan", args=[plan.pk])).content
    make_stack(prod, "GoldenCdkStack", data=RECORD)
    assert b"A record for this stack has appeared" in client.get(reverse("deploy_plan", args=[plan.pk])).content


def test_it_masks_secret_values_in_the_plan_document():
    doc = {
        "stack": "S",
        "region": "us-east-1",
        "changes": [
            {
                "logicalId": "Db",
                "changeType": "UPDATE",
                "resourceType": "AWS::RDS::DBInstance",
                "propertyChanges": [
                    {"path": "MasterUserPassword", "oldValue": "hunter2hunter2", "newValue": "n3wpassw0rd!"},
                    {"path": "Tags", "oldValue": [{"Key": "conn", "Value": "postgres://app:s3cretpw@db:5432/x"}]},
                    {"path": "DBName", "oldValue": "flagged-value-1", "newValue": "x-flagged-value-1"},
                ],
            }
        ],
        "outputChanges": [{"name": "DbPassword", "changeType": "MODIFY", "oldValue": "pw-123456", "newValue": "p"}],
        "children": [],
        "plan": {"warnings": ["password=abcdef123"]},
    }
    masked = deployplan.mask_plan_document(doc, known=["flagged-value-1"])
    text = json.dumps(masked)
    for secret in ("hunter2hunter2", "n3wpassw0rd!", "s3cretpw", "flagged-value-1", "pw-123456", "abcdef123"):
        assert secret not in text
    pcs = masked["changes"][0]["propertyChanges"]
    assert pcs[0]["oldValue"] == "***" and pcs[2]["newValue"] == "x-***"
    assert doc["changes"][0]["propertyChanges"][0]["oldValue"] == "hunter2hunter2"  # the input is untouched


def test_it_serves_the_plan_as_cdkd_json(golden, vera):
    plan = saved_plan(golden.account)
    response = logged_in(vera).get(reverse("deploy_plan_json", args=[plan.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    (node,) = json.loads(response.content)
    assert node["stack"] == "GoldenCdkStack" and node["plan"]["digest"] == "d" * 64


# --- who may do what ----------------------------------------------------------------------------


def test_it_lets_a_viewer_read_a_plan_but_not_make_one(golden, vera):
    plan = saved_plan(golden.account)
    client = logged_in(vera)
    assert client.get(reverse("deploy_plan", args=[plan.pk])).status_code == 200
    assert client.get(stack_plan_url()).status_code == 403
    response = client.post(stack_plan_url(), {"assembly_file": upload(zip_dir(GOLDEN))})
    assert response.status_code == 403 and b"needs the operator role" in response.content
    assert client.post(reverse("account_plan_new", args=[A]), {}).status_code == 403
    assert DeployPlan.objects.count() == 1 and Assembly.objects.count() == 1
    # the stack page shows no button the view would refuse
    assert b"plan-deploy-button" not in client.get(reverse("stack", args=[A, "us-east-1", "GoldenCdkStack"])).content


def test_it_hides_plans_and_plan_pages_from_an_outsider(golden, otto):
    plan = saved_plan(golden.account)
    client = logged_in(otto)
    assert client.get(reverse("deploy_plan", args=[plan.pk])).status_code == 404
    assert client.get(reverse("deploy_plan_json", args=[plan.pk])).status_code == 404
    assert client.get(stack_plan_url()).status_code == 404
    assert client.post(reverse("account_plan_new", args=[A]), {}).status_code == 404


def test_it_needs_a_csrf_token_to_plan(golden, olivia):
    client = Client(enforce_csrf_checks=True)
    client.force_login(olivia)
    response = client.post(stack_plan_url(), {"assembly_file": upload(zip_dir(GOLDEN))})
    assert response.status_code == 403 and Assembly.objects.count() == 0
    form = client.get(stack_plan_url())
    assert form.status_code == 200 and b'name="csrfmiddlewaretoken"' in form.content
    assert b'enctype="multipart/form-data"' in form.content and b"<script>" not in form.content


def test_it_does_not_offer_another_persons_stored_assembly(golden, olivia, dev):
    theirs = deployplan.store_assembly(read_assembly(files_of(GOLDEN)), user=make_user("someone"))
    client = logged_in(olivia)
    assert theirs.digest.encode() not in client.get(stack_plan_url()).content
    response = client.post(stack_plan_url(), {"assembly": theirs.digest})
    assert response.status_code == 404 and b"No stored assembly with that digest" in response.content


# --- refused uploads: a message and a 4xx, nothing planned ------------------------------------


def _sample_with_manifest(edit) -> bytes:
    files = files_of(GOLDEN)
    manifest = json.loads(files["manifest.json"])
    edit(manifest)
    files["manifest.json"] = json.dumps(manifest).encode()
    return zip_entries(files)


def _other_account(manifest):
    manifest["artifacts"]["GoldenCdkStack"]["environment"] = "aws://999999999999/us-east-1"


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        (b"this is not a zip", 400, "not a readable zip archive"),
        (zip_entries({"manifest.json": b"{}", "../evil.json": b"{}"}), 400, "climbs out of the assembly"),
        (zip_entries({"/etc/cron.d/x": b"{}"}), 400, "is an absolute path"),
        (zip_entries({"manifest.json": b"{}", "link": b"/etc/passwd"}, symlinks=("link",)), 400, "is a symlink"),
        (zip_entries({"manifest.json": b"[1"}), 400, "manifest.json: is not valid JSON"),
        (zip_entries({"manifest.json": b'{"version": "55.0.0", "artifacts": {}}'}), 400, "The assembly holds no stack"),
        (_sample_with_manifest(_other_account), 400, "is synthesized for account 999999999999"),
    ],
    ids=["not-a-zip", "zip-slip", "absolute", "symlink", "bad-manifest", "no-stack", "account-mismatch"],
)
def test_it_refuses_a_bad_upload_with_a_message(golden, olivia, data, status, message):
    response = logged_in(olivia).post(stack_plan_url(), {"assembly_file": upload(data)})
    assert response.status_code == status
    assert message in response.content.decode().replace("&#x27;", "'")
    assert b'id="plan-error"' in response.content
    assert DeployPlan.objects.count() == 0 and Assembly.objects.count() == 0


def test_it_refuses_an_upload_over_the_size_limit(golden, olivia, settings):
    settings.CDKD_ASSEMBLY_MAX_BYTES = 2048
    big = zip_entries({"manifest.json": b"{}", "pad.bin": bytes(range(256)) * 16})
    response = logged_in(olivia).post(stack_plan_url(), {"assembly_file": upload(big)})
    assert response.status_code == 413 and b"over the limit of 2.0" in response.content
    # a small zip that expands past the limit is refused as it is read
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("manifest.json", b"{}")
        zf.writestr("pad.bin", b"x" * 100_000)
    assert len(buf.getvalue()) < 2048
    response = logged_in(olivia).post(stack_plan_url(), {"assembly_file": upload(buf.getvalue())})
    assert response.status_code == 400 and b"expands to" in response.content
    assert Assembly.objects.count() == 0


def test_it_refuses_a_stack_the_assembly_does_not_hold(prod, olivia):
    client = logged_in(olivia)
    response = client.post(
        reverse("account_plan_new", args=[A]), {"assembly_file": upload(zip_dir(GOLDEN)), "stack": "Nope"}
    )
    assert response.status_code == 400
    assert "no stack named 'Nope' (stacks: GoldenCdkStack)" in response.content.decode().replace("&#x27;", "'")
    response = client.post(
        reverse("account_plan_new", args=[A]), {"assembly_file": upload(zip_dir(GOLDEN)), "parameters": "oops"}
    )
    assert response.status_code == 400 and b"is not of the form KEY=VALUE" in response.content
    response = client.post(reverse("account_plan_new", args=[A]), {})
    assert response.status_code == 400 and b"Upload a zip of a synthesized cdk.out" in response.content
    assert DeployPlan.objects.count() == 0


@pytest.mark.integration
def test_it_plans_a_new_environment_agnostic_stack_with_its_nested_stack_from_the_account_page(world, olivia):
    client = logged_in(olivia)
    data = {"assembly_file": upload(zip_dir(NESTED)), "region": "eu-west-1", "recursive": "on", "parameters": "Env=qa"}
    response = client.post(reverse("account_plan_new", args=[A]), data)
    assert response.status_code == 302
    plan = DeployPlan.objects.get()
    assert (plan.stack_name, plan.region, plan.state_etag) == ("NestedApp", "eu-west-1", "")
    assert plan.parameters == {"Env": "qa"} and plan.recursive and plan.blocking_count == 2
    (child,) = plan.document["children"]
    assert child["stack"].startswith("NestedApp~") and child["region"] == "eu-west-1"
    # a new stack and its child: the region key and the legacy key, each
    assert world.requests["GetObject"] == 4
    html = client.get(response["Location"]).content.decode()
    assert "custom resources are not supported" in html and "nested stacks are not supported" in html
    assert f"Nested: {child['stack']}" in html
    assert "(no record: a new stack)" in html and "Env=qa" in html


@pytest.mark.integration
def test_it_answers_502_when_s3_refuses_and_400_for_a_malformed_region(world, olivia):
    client = logged_in(olivia)
    world.deny(BUCKET)
    response = client.post(stack_plan_url_for_new(), {"assembly_file": upload(zip_dir(GOLDEN))})
    assert response.status_code == 502 and b"S3 could not be read" in response.content
    response = client.post(stack_plan_url_for_new(), {"assembly_file": upload(zip_dir(NESTED)), "region": "../x"})
    assert response.status_code == 400 and b"The region must look like us-east-1." in response.content
    assert DeployPlan.objects.count() == 0


def stack_plan_url_for_new() -> str:
    return reverse("account_plan_new", args=[A])


@pytest.mark.integration
def test_it_stores_and_shows_the_plan_masked(world, olivia):
    leaky = json.loads(json.dumps(RECORD))
    leaky["resources"]["Param165332EC"]["properties"]["Value"] = "postgres://app:s3cretpw@db:5432/app"
    world.put(A, BUCKET, KEY, leaky)
    client = logged_in(olivia)
    response = client.post(reverse("account_plan_new", args=[A]), {"assembly_file": upload(zip_dir(GOLDEN))})
    plan = DeployPlan.objects.get()
    (change,) = [c for c in plan.document["changes"] if c["logicalId"] == "Param165332EC"]
    assert change["propertyChanges"][0]["oldValue"] == "postgres://app:***@db:5432/app"
    assert "s3cretpw" not in json.dumps(plan.document)
    page = client.get(response["Location"]).content.decode()
    assert "postgres://app:***@db:5432/app" in page and "s3cretpw" not in page


def test_it_reads_the_assembly_storage_setting(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from cdkd_site import settings as site

    assert site.STORAGES["assemblies"]["BACKEND"] == "django.core.files.storage.FileSystemStorage"
    assert site.STORAGES["assemblies"]["OPTIONS"]["location"].endswith("/var/assemblies")
    monkeypatch.setenv("CDKD_TEST_OPTIONS", '{"bucket_name": "my-assemblies"}')
    assert site.envjson("CDKD_TEST_OPTIONS") == {"bucket_name": "my-assemblies"}
    monkeypatch.setenv("CDKD_TEST_OPTIONS", "[1]")
    with pytest.raises(ImproperlyConfigured, match="CDKD_TEST_OPTIONS must be a JSON object"):
        site.envjson("CDKD_TEST_OPTIONS")
