"""engine.deploy.names against reference 3.5 and the physical ids cdkd 0.284.40 recorded."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from engine.deploy.names import RULES, generate, physical_name

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "deploy" / "cdkd-0.284.40" / "state.json"


def test_it_names_the_sample_stacks_resources_as_cdkd_did():
    record = json.loads(SAMPLE.read_bytes())
    rows = record["resources"]
    assert (
        physical_name("AWS::SNS::Topic", "TopicBFC7AF6E", {}, stack_name="GoldenCdkStack")
        == (rows["TopicBFC7AF6E"]["attributes"]["TopicName"])
    )
    assert (
        physical_name("AWS::SQS::Queue", "Queue4A7E3555", {"VisibilityTimeout": 45}, stack_name="GoldenCdkStack")
        == (rows["Queue4A7E3555"]["attributes"]["QueueName"])
    )
    assert (
        physical_name("AWS::SSM::Parameter", "Param165332EC", {}, stack_name="GoldenCdkStack")
        == (rows["Param165332EC"]["physicalId"])
    )


def test_it_uses_a_supplied_name_verbatim_outside_pattern_b():
    assert physical_name("AWS::SQS::Queue", "Q", {"QueueName": "deploy-q"}, stack_name="S") == "deploy-q"
    assert physical_name("AWS::SSM::Parameter", "P", {"Name": "/my/param_x"}, stack_name="S") == "/my/param_x"


def test_it_sanitizes_a_supplied_pattern_b_name_without_the_stack_prefix():
    assert physical_name("AWS::IAM::Role", "R", {"RoleName": "my_role"}, stack_name="S") == "my-role"
    assert physical_name("AWS::IAM::Role", "R", {"RoleName": "a+b=c,d.e@f"}, stack_name="S") == "a-b-c-d-e-f"


def test_it_prefixes_log_groups_with_cdkd_and_keeps_slashes_and_underscores():
    assert physical_name("AWS::Logs::LogGroup", "Logs1234", {}, stack_name="My_Stack") == "/cdkd/My_Stack-Logs1234"
    assert physical_name("AWS::SQS::Queue", "Logs1234", {}, stack_name="My_Stack") == "My-Stack-Logs1234"


def test_it_collapses_and_trims_hyphens():
    rule = RULES["AWS::SQS::Queue"][1]
    assert generate("__x..y__", rule, stack_name="-Stack-") == "Stack-x-y"


def test_it_truncates_with_the_sha256_of_the_unsanitized_base():
    logical = "VeryLongLogicalId" * 6  # 102 characters
    full = f"Stack-{logical}"
    name = physical_name("AWS::SQS::Queue", logical, {}, stack_name="Stack")
    assert len(name) == 80
    assert name == full[:71] + "-" + hashlib.sha256(full.encode()).hexdigest()[:8]


def test_it_hashes_before_lowercasing_and_trims_the_cut_hyphen():
    # S3: lowercase, [a-z0-9.-], max 63; the hash is over the mixed-case, unsanitized base
    logical = "A" * 53 + "_B" * 10
    full = f"Stack-{logical}"
    name = physical_name("AWS::S3::Bucket", logical, {}, stack_name="Stack")
    sanitized = full.lower().replace("_", "-")
    head = sanitized[:54].rstrip("-")
    assert name == f"{head}-{hashlib.sha256(full.encode()).hexdigest()[:8]}"
    assert name != f"{head}-{hashlib.sha256(sanitized.encode()).hexdigest()[:8]}"


@pytest.mark.parametrize(
    ("rtype", "limit"),
    [
        ("AWS::SQS::Queue", 80),
        ("AWS::SNS::Topic", 256),
        ("AWS::IAM::Role", 64),
        ("AWS::IAM::Policy", 64),
        ("AWS::IAM::ManagedPolicy", 128),
        ("AWS::Lambda::Function", 64),
        ("AWS::DynamoDB::Table", 255),
        ("AWS::SecretsManager::Secret", 512),
        ("AWS::S3::Bucket", 63),
    ],
)
def test_it_keeps_each_types_maximum(rtype, limit):
    assert RULES[rtype][1].max_length == limit
    name = physical_name(rtype, "L" * 600, {}, stack_name="Stack")
    assert len(name) == limit


def test_it_cuts_just_before_a_hyphen_and_drops_it():
    # SQS max 80: keep 71 characters; make character 71 (0-based 70) a hyphen
    rule = RULES["AWS::SQS::Queue"][1]
    logical = "a" * 64 + "-" + "b" * 40  # "S-" + 64 a = 66 chars, the hyphen is at 66
    name = generate(logical, rule, stack_name="S")
    assert name.startswith("S-" + "a" * 64 + "-" + "b" * 4 + "-")
    logical = "a" * 68 + "-" + "b" * 40  # the hyphen at index 70, the last kept character
    name = generate(logical, rule, stack_name="S")
    full = "S-" + logical
    assert name == "S-" + "a" * 68 + "-" + hashlib.sha256(full.encode()).hexdigest()[:8]
