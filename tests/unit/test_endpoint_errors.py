"""An endpoint that answers with a page instead of an AWS error (moto's HTML 500 for Cloud
Control, a proxy's error page) is reduced to one line: its status, the service, and that it
named no error code. Against a stub HTTP server, through real botocore clients."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from botocore.config import Config

from engine import aws as engine_aws
from engine.providers import CloudControlProvider, ProviderError, ResourceRef
from engine.providers.sqs import PROVIDERS as SQS_PROVIDERS

PAGE = (
    b"<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n"
    b"<h1>Internal Server Error</h1>\n<p>The server encountered an internal error and was unable to "
    b"complete your request. Either the server is overloaded or there is an error in the application.</p>\n"
) * 20  # a long page, as moto's is with its traceback


class _HtmlErrors(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(500)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def html_endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HtmlErrors)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _clients(endpoint: str):
    session = boto3.Session(aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1")
    config = Config(retries={"mode": "standard", "max_attempts": 1})
    return lambda service, region: session.client(service, region_name=region, endpoint_url=endpoint, config=config)


def test_it_reduces_a_cloud_control_html_500_to_its_status(html_endpoint):
    ref = ResourceRef("Rule1", "AWS::Events::Rule", "prod-rule-1", region="us-east-1", provisioned_by="cc-api")
    provider = CloudControlProvider(sleep=lambda s: None)
    with pytest.raises(ProviderError) as caught:
        provider.delete(_clients(html_endpoint), ref)
    message = str(caught.value)
    assert message == (
        "Rule1 (AWS::Events::Rule prod-rule-1): cloudcontrol:DeleteResource failed: "
        "HTTP 500 from cloudcontrol (no error code)"
    )
    assert caught.value.aws_code is None


def test_it_reduces_an_sdk_providers_html_500_too(html_endpoint):
    url = "https://sqs.us-east-1.amazonaws.com/111111111111/q"
    ref = ResourceRef("Queue1", "AWS::SQS::Queue", url, region="us-east-1")
    with pytest.raises(ProviderError) as caught:
        SQS_PROVIDERS[0].delete(_clients(html_endpoint), ref)
    message = str(caught.value)
    assert "<" not in message and "Internal Server Error" not in message
    assert message.endswith("failed: HTTP 500 from sqs (no error code)")


def test_it_reduces_an_s3_html_500_in_engine_errors(html_endpoint):
    s3 = _clients(html_endpoint)("s3", "us-east-1")
    with pytest.raises(Exception) as caught:
        s3.get_object(Bucket="b", Key="k")
    err = engine_aws.s3_error(caught.value, api="GetObject", account_id="111111111111", bucket="b", key="k")
    assert "<" not in str(err)
    assert len(str(err)) < 200


def test_it_keeps_a_real_message_but_bounds_it():
    from botocore.exceptions import ClientError

    exc = ClientError({"Error": {"Code": "ValidationException", "Message": "x " * 500}}, "DeleteResource")
    assert engine_aws.error_code(exc) == "ValidationException"
    message = engine_aws.error_message(exc, "cloudcontrol")
    assert len(message) == engine_aws.MAX_ERROR_MESSAGE and message.endswith("…")
    numeric = ClientError({"Error": {"Code": "502", "Message": ""}, "ResponseMetadata": {"HTTPStatusCode": 502}}, "X")
    assert engine_aws.error_code(numeric) == "502"  # callers compare with the stand-in status
    assert engine_aws.named_error_code(numeric) == ""
    assert engine_aws.error_message(numeric, "sqs") == "HTTP 502 from sqs (no error code)"
