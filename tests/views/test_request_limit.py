"""A request body over CDKD_REQUEST_MAX_BYTES is refused (413) before any of it is read:
no temporary upload file, no form parsed, no login needed to be refused."""

from __future__ import annotations

import json
import os

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from stacks.models import Assembly, DeployPlan, Membership, Role
from tests.views.conftest import make_account, make_user

pytestmark = pytest.mark.django_db

A = "111111111111"


def test_it_refuses_a_declared_huge_body_without_reading_it():
    client = Client(raise_request_exception=True)
    # 20 GB declared, a few bytes sent: the answer comes before anything reads the stream.
    response = client.generic("POST", "/login/", b"username=x", CONTENT_LENGTH=str(20 * 1024**3))

    assert response.status_code == 413
    assert "over the limit" in response.content.decode() and response["Content-Type"].startswith("text/plain")


def test_it_answers_the_api_in_json():
    response = Client().generic("POST", "/api/v1/operations", b"{}", CONTENT_LENGTH=str(10**12))
    assert response.status_code == 413 and "CDKD_REQUEST_MAX_BYTES" in json.loads(response.content)["message"]


def test_it_refuses_an_upload_over_the_limit_and_stores_nothing(settings, assembly_storage):
    settings.CDKD_REQUEST_MAX_BYTES = 65536
    account = make_account(A, "prod")
    olivia = make_user("olivia")
    Membership.objects.create(user=olivia, account=account, role=Role.OPERATOR)
    client = Client()
    client.force_login(olivia)
    upload = SimpleUploadedFile("cdk.out.zip", os.urandom(100_000), content_type="application/zip")

    response = client.post(reverse("account_plan_new", args=[A]), {"assembly_file": upload})

    assert response.status_code == 413
    assert not Assembly.objects.exists() and not DeployPlan.objects.exists()
    assert not assembly_storage.exists() or not any(assembly_storage.iterdir())


def test_it_lets_a_body_within_the_limit_through():
    response = Client().post("/login/", {"username": "nobody", "password": "wrong"})
    assert response.status_code == 200  # the login page again, with its error
