"""Control and bidi characters from a bucket are shown as their escapes on every page, and
never reach a log line raw: `RTL-\\u202egnp.exe` must not display as `RTL-exe.png`.

Mallory controls a bucket: her stack name carries U+202E (right-to-left override), a logical
id U+2066 (an isolate), a physical id an ANSI escape, an event reason a line break and a
zero-width space. Olivia, an operator on the account, looks at every page."""

from __future__ import annotations

import io
import logging
import re
import unicodedata

import pytest
from django.urls import reverse

from stacks.models import Membership, Role
from stacks.visible import CONTROLS, EscapeControlsFilter, visible, visible_html
from tests.views.conftest import make_stack, make_user, record, resource_row
from tests.views.test_events_pages import make_run

pytestmark = pytest.mark.django_db

A = "111111111111"
NAME = "RTL-\u202egnp.exe"
LID = "Queue\u2066Evil"
PHYSICAL = "q-\x1b[31mred"
RUN = "20261129T122811123Z-f37f3ced"
RAW = ("\u202e", "\u2066", "\x1b", "\u200b")


@pytest.fixture
def olivia_client(client, prod):
    olivia = make_user("olivia")
    Membership.objects.create(user=olivia, account=prod, role=Role.OPERATOR)
    client.force_login(olivia)
    return client


@pytest.fixture
def hostile(prod):
    data = record(NAME, resources={LID: resource_row("AWS::SQS::Queue", PHYSICAL)}, outputs={"Out\u202e": "v"})
    stack = make_stack(prod, NAME, data=data)
    events = [
        {
            "timestamp": "2026-11-29T12:28:11.152Z",
            "eventType": "RESOURCE_FAILED",
            "stackName": NAME,
            "logicalId": LID,
            "physicalId": PHYSICAL,
            "resourceType": "AWS::SQS::Queue",
            "reason": "deleted\nFAKE LOG LINE\u200b",
            "error": {"name": "X", "message": "bad \u202e message"},
        }
    ]
    make_run(prod, NAME, RUN, result="FAILED", events=events)
    return stack


def assert_no_raw(content: bytes) -> str:
    """No raw character anywhere but in form values (which post back the stored bytes)."""
    page = content.decode()
    shown = re.sub(r'\svalue="[^"]*"', "", page)
    for char in RAW:
        at = shown.find(char)
        assert at < 0, (unicodedata.name(char, repr(char)), shown[at - 80 : at + 80])
    return page


def test_it_escapes_exactly_the_control_format_and_separator_characters() -> None:
    assert visible(NAME) == "RTL-\\u202egnp.exe"
    assert visible("a\tb\nc\x00\U000e0001") == "a\\u0009b\\u000ac\\u0000\\U000e0001"
    assert visible("a\tb\nc", keep_layout=True) == "a\tb\nc"
    assert visible("café 日本 🚀 ok-_.:/|") == "café 日本 🚀 ok-_.:/|"
    covered = [c for c in range(0x110000) if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp")]
    assert all(CONTROLS.match(chr(c)) for c in covered)
    assert not any(CONTROLS.match(chr(c)) for c in range(0x20, 0x7F))


def test_it_escapes_text_and_titles_but_keeps_form_values() -> None:
    html = f'<p title="{NAME}">{NAME}</p><input type="hidden" name="resources" value="{LID}"><script>x</script>'
    out = visible_html(html)
    assert out == (
        '<p title="RTL-\\u202egnp.exe">RTL-\\u202egnp.exe</p>'
        f'<input type="hidden" name="resources" value="{LID}"><script>x</script>'
    )
    assert visible_html("<p>plain</p>") == "<p>plain</p>"


def test_the_list_the_stack_and_its_json_show_escapes(olivia_client, hostile):
    pages = [
        reverse("stacks"),
        reverse("stack_resources", args=[A, "us-east-1", NAME]),
        reverse("stack_json", args=[A, "us-east-1", NAME]),
        reverse("stack", args=[A, "us-east-1", NAME]),
    ]
    for url in pages:
        response = olivia_client.get(url)
        assert response.status_code == 200, url
        page = assert_no_raw(response.content)
        assert "RTL-\\u202egnp.exe" in page, url
    stack_page = olivia_client.get(pages[1]).content.decode()
    assert "Queue\\u2066Evil" in stack_page and "q-\\u001b[31mred" in stack_page


def test_the_events_pages_show_escapes(olivia_client, hostile):
    assert "RTL-\\u202egnp.exe" in assert_no_raw(olivia_client.get(reverse("events")).content)
    page = assert_no_raw(olivia_client.get(reverse("event_run", args=[A, "us-east-1", NAME, RUN])).content)
    assert "deleted\\u000aFAKE LOG LINE\\u200b" not in page  # a line break in a text node stays layout
    assert "FAKE LOG LINE\\u200b" in page and "bad \\u202e message" in page


def test_the_orphan_picker_shows_escapes_and_posts_the_real_id(olivia_client, hostile):
    url = reverse("operation_new", args=[A, "us-east-1", NAME, "orphan-resources"])
    response = olivia_client.get(url)
    assert response.status_code == 200
    page = response.content.decode()
    assert f'value="{LID}"' in page  # the checkbox posts the id as stored
    assert "Queue\\u2066Evil" in page and page.count("\u2066") == 1


def test_export_file_names_show_escapes(olivia_client, hostile):
    response = olivia_client.get(reverse("event_run", args=[A, "us-east-1", NAME, RUN]), {"format": "json"})
    assert response.status_code == 200
    assert "\u202e" not in response["Content-Disposition"]
    assert 'filename="RTL-\\\\u202egnp.exe-' in response["Content-Disposition"]  # a quoted-string escape
    assert response.json()[0]["stackName"] == NAME  # the data itself is exported as stored


def test_htmx_partials_show_escapes(olivia_client, hostile):
    response = olivia_client.get(reverse("stacks"), {"q": "RTL"}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert "RTL-\\u202egnp.exe" in assert_no_raw(response.content)


def test_no_log_line_holds_a_raw_control_character(settings):
    root = logging.getLogger()
    handlers = [h for h in root.handlers if any(isinstance(f, EscapeControlsFilter) for f in h.filters)]
    assert handlers, "settings.LOGGING's console handler carries the filter"
    handler = handlers[0]
    stream = io.StringIO()
    old = handler.setStream(stream)
    try:
        logging.getLogger("stacks.operations").warning("operation %s: deleted %s", 7, f"cdkd/{NAME}/x\nFAKE ok")
        try:
            raise ValueError(f"bad {NAME}")
        except ValueError:
            logging.getLogger("stacks.sync").exception("sync of %s failed", NAME)
    finally:
        handler.setStream(old)
    text = stream.getvalue()
    for char in ("\u202e", "\x1b"):
        assert char not in text
    lines = text.splitlines()
    assert lines[0].endswith("operation 7: deleted cdkd/RTL-\\u202egnp.exe/x\\u000aFAKE ok")
    assert "sync of RTL-\\u202egnp.exe failed" in lines[1]
    assert lines[-1] == "ValueError: bad RTL-\\u202egnp.exe"  # the traceback keeps its own lines
