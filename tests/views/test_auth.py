from __future__ import annotations

import pytest
from django.urls import reverse

from tests.views.conftest import make_stack

pytestmark = pytest.mark.django_db


def stack_urls(stack) -> list[str]:
    args = [stack.account.account_id, stack.region_slug, stack.stack_name]
    return [
        reverse("stack", args=args),
        reverse("stack_json", args=args),
        reverse("stack_download", args=args),
        reverse("stack_history", args=args),
        reverse("stack_diff", args=args) + "?a=v1&b=current",
        reverse("stack_version", args=[*args, "v1"]),
        reverse("stack_resource", args=[*args, "Bucket"]),
    ]


def test_it_redirects_anonymous_people_to_login(client, prod):
    stack = make_stack(prod, "web")
    for url in [reverse("stacks"), reverse("stacks_tree"), reverse("accounts"), *stack_urls(stack)]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response.url.startswith(reverse("login")), url


def test_it_redirects_the_root_to_stacks(alice_client):
    response = alice_client.get("/")
    assert response.status_code == 302
    assert response.url == reverse("stacks")


def test_it_shows_the_login_page(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b'name="username"' in response.content


def test_it_logs_in_and_lands_on_stacks(client, alice):
    response = client.post(reverse("login"), {"username": "alice", "password": "pw"})
    assert response.status_code == 302
    assert response.url == reverse("stacks")


def test_it_logs_out_with_post(alice_client):
    response = alice_client.post(reverse("logout"))
    assert response.status_code == 302
    assert alice_client.get(reverse("stacks")).status_code == 302


def test_it_gives_outsiders_404_on_every_stack_url(client, charlie, bob, prod):
    stack = make_stack(prod, "web")
    for user in (charlie, bob):
        client.force_login(user)
        for url in stack_urls(stack):
            assert client.get(url).status_code == 404, (user, url)
