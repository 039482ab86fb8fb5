"""AWS console links from a resource's type and physical id (stacks.console)."""

from __future__ import annotations

import pytest

from stacks.console import console_url


@pytest.mark.parametrize(
    ("rtype", "pid", "expected"),
    [
        ("AWS::S3::Bucket", "web-bucket", "https://s3.console.aws.amazon.com/s3/buckets/web-bucket?region=eu-west-1"),
        (
            "AWS::Lambda::Function",
            "web-fn",
            "https://eu-west-1.console.aws.amazon.com/lambda/home?region=eu-west-1#/functions/web-fn",
        ),
        (
            "AWS::SQS::Queue",
            "https://sqs.eu-west-1.amazonaws.com/1/q",
            "https://eu-west-1.console.aws.amazon.com/sqs/v3/home?region=eu-west-1"
            "#/queues/https%3A%2F%2Fsqs.eu-west-1.amazonaws.com%2F1%2Fq",
        ),
        ("AWS::IAM::Role", "web-role", "https://console.aws.amazon.com/iam/home#/roles/details/web-role"),
        (
            "AWS::EC2::VPC",
            "vpc-0abc",
            "https://eu-west-1.console.aws.amazon.com/vpcconsole/home?region=eu-west-1#VpcDetails:VpcId=vpc-0abc",
        ),
    ],
)
def test_it_links_known_types(rtype, pid, expected) -> None:
    assert console_url(rtype, pid, "eu-west-1") == expected


def test_it_falls_back_on_the_arns_service_and_region() -> None:
    arn = "arn:aws:sns:us-west-2:111111111111:alerts"
    url = console_url("Custom::Thing", arn, "eu-west-1")
    assert url == (
        "https://us-west-2.console.aws.amazon.com/sns/v3/home?region=us-west-2"
        "#/topic/arn%3Aaws%3Asns%3Aus-west-2%3A111111111111%3Aalerts"
    )
    fn = console_url("AWS::Lambda::Function", "arn:aws:lambda:eu-west-1:1:function:web-fn", "us-east-1")
    assert fn == "https://eu-west-1.console.aws.amazon.com/lambda/home?region=eu-west-1#/functions/web-fn"
    # An ARN with no region (IAM, S3) takes the stack's.
    bucket = console_url("Custom::B", "arn:aws:s3:::web-bucket", "eu-west-1")
    assert bucket == "https://s3.console.aws.amazon.com/s3/buckets/web-bucket?region=eu-west-1"


@pytest.mark.parametrize(
    ("rtype", "pid", "region"),
    [
        ("AWS::Glue::Table", "analytics|events|v2", "us-east-1"),  # composite: no single page
        ("AWS::Unknown::Thing", "x-1", "us-east-1"),
        ("AWS::S3::Bucket", "web-bucket", None),  # a legacy key: no region known
        ("AWS::S3::Bucket", "web-bucket", "javascript:alert(1)//"),
        ("AWS::S3::Bucket", "", "us-east-1"),
        ("Custom::X", "arn:aws:unknownsvc:us-east-1:1:thing/x", "us-east-1"),
        ("Custom::X", "arn:aws:sns:evil.example/x:1:t", "us-east-1"),
    ],
)
def test_it_gives_no_link_where_unknown(rtype, pid, region) -> None:
    assert console_url(rtype, pid, region) is None


def test_it_percent_encodes_hostile_ids() -> None:
    url = console_url("AWS::S3::Bucket", 'a"><script>/../x?y#z', "us-east-1")
    assert url == "https://s3.console.aws.amazon.com/s3/buckets/a%22%3E%3Cscript%3E%2F..%2Fx%3Fy%23z?region=us-east-1"
