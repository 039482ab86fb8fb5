"""engine.drift's comparator on its own: seed 000's carve-outs and the masked positions."""

from __future__ import annotations

from engine.drift import compare
from engine.refresh import masked_readback


def row(properties, observed=None, **extra):
    out = {"resourceType": "AWS::SQS::Queue", "physicalId": "q", "properties": properties, **extra}
    if observed is not None:
        out["observedProperties"] = observed
    return out


def test_it_skips_an_undeclared_key_captured_empty_but_compares_one_captured_with_a_value():
    baseline = {"Tags": [], "Policies": {}, "VisibilityTimeout": 30}
    live = {"Tags": [{"Key": "added", "Value": "later"}], "Policies": {"p": 1}, "VisibilityTimeout": 99}

    result = compare(live, row({}, baseline))

    assert result.differences == [{"path": "VisibilityTimeout", "expected": 30, "actual": 99}]


def test_it_compares_only_declared_keys_without_a_baseline_and_reads_45_as_the_string_45():
    result = compare({"VisibilityTimeout": "45", "DelaySeconds": 5, "Tags": []}, row({"VisibilityTimeout": 45}))

    assert result.differences == [] and result.masked == []


def test_it_never_shows_a_masked_position_and_masks_a_secret_named_difference():
    properties = {"Config": {"Token": "***", "Name": "a"}, "DbPassword": "old-value"}
    live = {"Config": {"Token": "the-live-secret", "Name": "b"}, "DbPassword": "new-value"}

    result = compare(live, row(properties, noEchoLeaves=[["Config", "Token"]]))

    assert result.masked == ["Config.Token"]
    assert result.differences == [
        {"path": "Config.Name", "expected": "a", "actual": "b"},
        {"path": "DbPassword", "expected": "***", "actual": "***"},
    ]
    assert "the-live-secret" not in repr(result) and "new-value" not in repr(result)


def test_it_masks_a_read_back_where_the_record_holds_a_mask_or_a_reference():
    properties = {"A": "***", "B": "{{resolve:secretsmanager:s:SecretString:k::}}", "C": [1, "***"]}
    live = {"A": "plain-a", "B": "plain-b", "C": [1, "plain-c"], "D": "kept"}

    assert masked_readback(live, row(properties)) == {
        "A": "***",
        "B": "{{resolve:secretsmanager:s:SecretString:k::}}",
        "C": [1, "***"],
        "D": "kept",
    }
