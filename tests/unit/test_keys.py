from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from engine.keys import (
    DEFAULT_PREFIX,
    KeyKind,
    KeyLayout,
    ParsedKey,
    bootstrap_marker_key,
    child_stack_name,
    cr_response_key,
    is_region_shaped,
    migrate_tmp_key,
    new_run_id,
    parse_global,
    run_id_timestamp_ms,
)

# Every character S3 can hold in a key segment except "/", plus lengths near S3's limit.
AWKWARD_NAMES = [
    "MyStack",
    "my-stack-2",
    "Stack With Spaces",
    " leading-and-trailing ",
    "per%20cent%2F",
    "plus+sign",
    "question?mark",
    "hash#tag",
    "amp&semi;colon",
    "quote\"double'single`back",
    "tilde~only",
    "Root~Child~Grandchild",
    "日本語スタック",
    "emoji-🚀-stack",
    "cafe\u0301",  # NFD; must not be normalised to NFC
    "café",
    "back\\slash",
    "state.json",
    "deployments",
    "lock.json",
    "_index",
    ".",
    "..",
    "us-east-1",
    "tab\tand\nnewline",
    "S" * 900,
]
AWKWARD_REGIONS = ["us-east-1", "eusc-de-east-1", "ap-southeast-7", "not a region", "R%2F", "日本"]
PREFIXES = ["cdkd", "teams/platform", "a/b/c", "cdkd-state", "前缀"]


def test_it_defaults_to_the_cdkd_prefix():
    layout = KeyLayout()
    assert layout.prefix == DEFAULT_PREFIX == "cdkd"
    assert layout.list_prefix == "cdkd/"


@pytest.mark.parametrize(
    ("given", "expected"),
    [("cdkd", "cdkd"), ("/cdkd/", "cdkd"), ("teams/platform/", "teams/platform"), ("//a/b//", "a/b")],
)
def test_it_normalises_prefix_slashes(given, expected):
    layout = KeyLayout(given)
    assert layout.prefix == expected
    assert layout.state_key("S", "us-east-1") == f"{expected}/S/us-east-1/state.json"


@pytest.mark.parametrize("prefix", ["", "/", "///", "a//b"])
def test_it_rejects_empty_prefixes(prefix):
    with pytest.raises(ValueError, match="prefix"):
        KeyLayout(prefix)


def test_it_builds_every_prefixed_family():
    layout = KeyLayout("teams/platform")
    assert layout.state_key("S", "eu-west-1") == "teams/platform/S/eu-west-1/state.json"
    assert layout.legacy_state_key("S") == "teams/platform/S/state.json"
    assert layout.lock_key("S", "eu-west-1") == "teams/platform/S/eu-west-1/lock.json"
    assert layout.lock_key("S", None) == "teams/platform/S/lock.json"
    assert layout.rollback_journal_key("S", "eu-west-1") == "teams/platform/S/eu-west-1/rollback-journal.json"
    assert layout.create_tokens_key("S", "eu-west-1") == "teams/platform/S/eu-west-1/create-tokens.json"
    assert layout.events_prefix("S", "eu-west-1") == "teams/platform/S/eu-west-1/deployments/"
    assert layout.event_index_key("S", "eu-west-1") == "teams/platform/S/eu-west-1/deployments/index.json"
    assert (
        layout.event_stream_key("S", "eu-west-1", "20260613T012345678Z-1a2b3c4d")
        == "teams/platform/S/eu-west-1/deployments/20260613T012345678Z-1a2b3c4d.jsonl"
    )
    assert layout.exports_index_key("us-east-1") == "teams/platform/_index/us-east-1/exports.json"
    assert layout.stack_prefix("S") == "teams/platform/S/"


def test_it_builds_the_prefixless_families():
    assert bootstrap_marker_key("us-east-1") == "cdkd-bootstrap/us-east-1.json"
    assert cr_response_key("cdkd-1795955291342-k3j2") == "custom-resource-responses/cdkd-1795955291342-k3j2.json"
    assert migrate_tmp_key("S", 1795955291342) == "cdkd-migrate-tmp/S/1795955291342.json"
    assert migrate_tmp_key("S", 7, "yaml") == "cdkd-migrate-tmp/S/7.yaml"


@pytest.mark.parametrize("bad", ["", "a/b", "/", "S/"])
def test_it_refuses_stack_names_and_regions_that_change_the_depth(bad):
    layout = KeyLayout()
    builders = [
        lambda: layout.state_key(bad, "us-east-1"),
        lambda: layout.state_key("S", bad),
        lambda: layout.legacy_state_key(bad),
        lambda: layout.lock_key(bad, None),
        lambda: layout.lock_key("S", bad),
        lambda: layout.rollback_journal_key(bad, "us-east-1"),
        lambda: layout.create_tokens_key("S", bad),
        lambda: layout.events_prefix(bad, "us-east-1"),
        lambda: layout.event_index_key("S", bad),
        lambda: layout.event_stream_key("S", "us-east-1", bad),
        lambda: layout.exports_index_key(bad),
        lambda: layout.stack_prefix(bad),
        lambda: bootstrap_marker_key(bad),
        lambda: cr_response_key(bad),
        lambda: migrate_tmp_key(bad, 1),
    ]
    for build in builders:
        with pytest.raises(ValueError):
            build()


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("stack", AWKWARD_NAMES)
def test_it_round_trips_region_scoped_keys_for_awkward_names(prefix, stack):
    layout = KeyLayout(prefix)
    for region in AWKWARD_REGIONS:
        cases = [
            (layout.state_key(stack, region), KeyKind.STATE),
            (layout.lock_key(stack, region), KeyKind.LOCK),
            (layout.rollback_journal_key(stack, region), KeyKind.ROLLBACK_JOURNAL),
            (layout.create_tokens_key(stack, region), KeyKind.CREATE_TOKENS),
            (layout.event_index_key(stack, region), KeyKind.EVENT_INDEX),
        ]
        for key, kind in cases:
            parsed = layout.parse(key)
            assert parsed == ParsedKey(kind=kind, key=key, stack_name=stack, region=region)


@pytest.mark.parametrize("stack", AWKWARD_NAMES)
def test_it_round_trips_legacy_keys_for_awkward_names(stack):
    layout = KeyLayout("teams/platform")
    key = layout.legacy_state_key(stack)
    assert layout.parse(key) == ParsedKey(kind=KeyKind.LEGACY_STATE, key=key, stack_name=stack)
    lock = layout.lock_key(stack, None)
    assert layout.parse(lock) == ParsedKey(kind=KeyKind.LEGACY_LOCK, key=lock, stack_name=stack)


@pytest.mark.parametrize("run_id", ["20260613T012345678Z-1a2b3c4d", "index", "run with spaces", "a.jsonl", "ü"])
@pytest.mark.parametrize("stack", ["S", "Root~Child", "q?#%+ \"'"])
def test_it_round_trips_event_stream_keys(stack, run_id):
    layout = KeyLayout()
    key = layout.event_stream_key(stack, "us-west-2", run_id)
    assert layout.parse(key) == ParsedKey(
        kind=KeyKind.EVENT_STREAM, key=key, stack_name=stack, region="us-west-2", run_id=run_id
    )


@pytest.mark.parametrize("region", AWKWARD_REGIONS)
def test_it_round_trips_exports_index_keys(region):
    layout = KeyLayout("a/b/c")
    key = layout.exports_index_key(region)
    assert layout.parse(key) == ParsedKey(kind=KeyKind.EXPORTS_INDEX, key=key, region=region)


def test_it_parses_the_exports_index_sample_key():
    # The sample file name is the key with "/" spelled "__".
    key = "cdkd___index__us-east-1__exports.json".replace("__", "/")
    assert key == "cdkd/_index/us-east-1/exports.json"
    parsed = KeyLayout().parse(key)
    assert parsed is not None
    assert (parsed.kind, parsed.region, parsed.stack_name) == (KeyKind.EXPORTS_INDEX, "us-east-1", None)


def test_it_takes_a_stack_named_index_as_a_stack_for_record_files():
    layout = KeyLayout()
    parsed = layout.parse("cdkd/_index/us-east-1/state.json")
    assert parsed is not None
    assert (parsed.kind, parsed.stack_name, parsed.region) == (KeyKind.STATE, "_index", "us-east-1")


@pytest.mark.parametrize(
    "key",
    [
        "cdkd/team-a/S/us-east-1/state.json",  # nested custom prefix: 4 segments
        "cdkd/team-a/S/us-east-1/lock.json",
        "cdkd/team-a/S/us-east-1/deployments/index.json",  # 5 segments
        "cdkd/team-a/S/us-east-1/deployments/r.jsonl",
        "cdkd/_index/us-east-1/x/exports.json",
    ],
)
def test_it_ignores_keys_deeper_than_the_layout(key):
    assert KeyLayout().parse(key) is None


def test_it_reads_a_nested_prefix_legacy_key_the_way_cdkd_does():
    # Reference §1.7a: 3 segments are region-scoped; cdkd itself misreads this one.
    parsed = KeyLayout().parse("cdkd/team-a/S/state.json")
    assert parsed is not None
    assert (parsed.kind, parsed.stack_name, parsed.region) == (KeyKind.STATE, "team-a", "S")
    # Listed under its own prefix, the same key is the legacy record it really is.
    own = KeyLayout("cdkd/team-a").parse("cdkd/team-a/S/state.json")
    assert own == ParsedKey(kind=KeyKind.LEGACY_STATE, key="cdkd/team-a/S/state.json", stack_name="S")


@pytest.mark.parametrize(
    "key",
    [
        "cdkd//us-east-1/state.json",
        "cdkd/S//state.json",
        "cdkd//state.json",
        "cdkd/S/us-east-1/deployments/.jsonl",
        "cdkd/S/us-east-1//index.json",
        "cdkd//us-east-1/deployments/index.json",
        "cdkd/_index//exports.json",
        "cdkd/S/us-east-1/state.json/",
    ],
)
def test_it_rejects_keys_with_empty_segments(key):
    assert KeyLayout().parse(key) is None


@pytest.mark.parametrize(
    "key",
    [
        "cdkd",
        "cdkd/",
        "cdkd/state.json",
        "cdkdx/S/us-east-1/state.json",  # shares the text, not the prefix
        "cdkd-bootstrap/us-east-1.json",
        "other/S/us-east-1/state.json",
        "CDKD/S/us-east-1/state.json",  # S3 keys are case-sensitive
        "/cdkd/S/us-east-1/state.json",
        "cdkd/S/us-east-1/State.json",
        "cdkd/S/us-east-1/state.json.bak",
        "cdkd/S/us-east-1/exports.json",
        "cdkd/S/exports.json",
        "cdkd/S/rollback-journal.json",  # no legacy journal exists
        "cdkd/S/us-east-1/deployments/notes.txt",
        "cdkd/S/us-east-1/deployments/index.jsonx",
        "cdkd/S/us-east-1/other/index.json",
        "cdkd/S/deployments/index.json",
        "cdkd/_index/us-east-1/imports.json",
    ],
)
def test_it_returns_none_for_keys_that_are_not_records_of_the_prefix(key):
    assert KeyLayout().parse(key) is None


def test_it_only_parses_keys_under_its_own_prefix():
    key = KeyLayout("teams/platform").state_key("S", "us-east-1")
    assert KeyLayout("teams").parse(key) is None  # 4 segments under "teams"
    assert KeyLayout("teams/platform/x").parse(key) is None
    assert KeyLayout("/teams/platform/").parse(key) is not None


def test_it_takes_the_region_from_the_key():
    parsed = KeyLayout().parse("cdkd/S/ap-northeast-1/state.json")
    assert parsed is not None
    assert parsed.region == "ap-northeast-1"
    legacy = KeyLayout().parse("cdkd/S/state.json")
    assert legacy is not None
    assert legacy.region is None


def test_it_does_not_normalise_unicode():
    layout = KeyLayout()
    nfd, nfc = "cafe\u0301", "caf\u00e9"
    parsed_nfd = layout.parse(layout.state_key(nfd, "us-east-1"))
    parsed_nfc = layout.parse(layout.state_key(nfc, "us-east-1"))
    assert parsed_nfd is not None and parsed_nfc is not None
    assert parsed_nfd.stack_name == nfd
    assert parsed_nfc.stack_name == nfc
    assert parsed_nfd != parsed_nfc


def test_it_describes_nested_lineage():
    layout = KeyLayout()
    name = child_stack_name(child_stack_name("Root", "Child"), "Grandchild")
    assert name == "Root~Child~Grandchild"
    parsed = layout.parse(layout.state_key(name, "us-east-1"))
    assert parsed is not None
    assert parsed.stack_name == "Root~Child~Grandchild"
    assert parsed.lineage == ["Root", "Child", "Grandchild"]
    assert parsed.parent_name == "Root~Child"
    assert parsed.child_logical_id == "Grandchild"
    assert parsed.is_nested

    child = layout.parse(layout.lock_key("Root~Child", "us-east-1"))
    assert child is not None
    assert (child.lineage, child.parent_name, child.child_logical_id) == (["Root", "Child"], "Root", "Child")


def test_it_treats_top_level_and_malformed_tilde_names_as_unnested():
    layout = KeyLayout()
    for name in ["Root", "Root~", "~Child", "A~~B", "~"]:
        parsed = layout.parse(layout.state_key(name, "us-east-1"))
        assert parsed is not None
        assert parsed.lineage == [name]
        assert parsed.parent_name is None
        assert parsed.child_logical_id is None
        assert not parsed.is_nested


def test_it_gives_no_lineage_to_keys_without_a_stack():
    parsed = KeyLayout().parse("cdkd/_index/us-east-1/exports.json")
    assert parsed is not None
    assert (parsed.lineage, parsed.parent_name, parsed.child_logical_id) == ([], None, None)


@pytest.mark.parametrize(("parent", "logical_id"), [("", "C"), ("P", ""), ("P/x", "C"), ("P", "C/x"), ("P", "C~D")])
def test_it_refuses_impossible_child_names(parent, logical_id):
    with pytest.raises(ValueError):
        child_stack_name(parent, logical_id)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (
            "cdkd-bootstrap/us-east-1.json",
            ParsedKey(kind=KeyKind.BOOTSTRAP_MARKER, key="cdkd-bootstrap/us-east-1.json", region="us-east-1"),
        ),
        (
            "custom-resource-responses/cdkd-1795955291342-a1b2c3.json",
            ParsedKey(
                kind=KeyKind.CR_RESPONSE,
                key="custom-resource-responses/cdkd-1795955291342-a1b2c3.json",
                request_id="cdkd-1795955291342-a1b2c3",
            ),
        ),
        (
            "cdkd-migrate-tmp/MyStack/1795955291342.json",
            ParsedKey(
                kind=KeyKind.MIGRATE_TMP,
                key="cdkd-migrate-tmp/MyStack/1795955291342.json",
                stack_name="MyStack",
                epoch_ms=1795955291342,
            ),
        ),
        (
            "cdkd-migrate-tmp/cdkd-macro-expand-0123456789abcdef/17.yaml",
            ParsedKey(
                kind=KeyKind.MIGRATE_TMP,
                key="cdkd-migrate-tmp/cdkd-macro-expand-0123456789abcdef/17.yaml",
                stack_name="cdkd-macro-expand-0123456789abcdef",
                epoch_ms=17,
            ),
        ),
    ],
)
def test_it_parses_prefixless_families(key, expected):
    assert parse_global(key) == expected


@pytest.mark.parametrize(
    "key",
    [
        "cdkd-bootstrap/.json",
        "cdkd-bootstrap/us-east-1.yaml",
        "cdkd-bootstrap/x/us-east-1.json",
        "cdkd-bootstrap//us-east-1.json",
        "custom-resource-responses/.json",
        "custom-resource-responses/a/b.json",
        "cdkd-migrate-tmp/S/abc.json",
        "cdkd-migrate-tmp/S/12.txt",
        "cdkd-migrate-tmp/S/١٢.json",  # non-ASCII digits are not an epoch
        "cdkd-migrate-tmp//12.json",
        "cdkd-migrate-tmp/12.json",
        "cdkd/S/us-east-1/state.json",
        "prefix/cdkd-bootstrap/us-east-1.json",
    ],
)
def test_it_returns_none_for_other_global_keys(key):
    assert parse_global(key) is None


@pytest.mark.parametrize("stack", AWKWARD_NAMES)
def test_it_round_trips_prefixless_keys(stack):
    cr = parse_global(cr_response_key(stack))
    assert cr is not None and cr.request_id == stack
    tmp = parse_global(migrate_tmp_key(stack, 42, "yaml"))
    assert tmp is not None and (tmp.stack_name, tmp.epoch_ms) == (stack, 42)


def test_it_classifies_whole_bucket_listings():
    layout = KeyLayout()
    kinds = {
        key: (parsed.kind if (parsed := layout.classify(key)) else None)
        for key in [
            "cdkd/S/us-east-1/state.json",
            "cdkd-bootstrap/us-east-1.json",
            "custom-resource-responses/r.json",
            "random/file.txt",
        ]
    }
    assert kinds == {
        "cdkd/S/us-east-1/state.json": KeyKind.STATE,
        "cdkd-bootstrap/us-east-1.json": KeyKind.BOOTSTRAP_MARKER,
        "custom-resource-responses/r.json": KeyKind.CR_RESPONSE,
        "random/file.txt": None,
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("us-east-1", True),
        ("ap-southeast-7", True),
        ("us-gov-west-1", True),
        ("cn-northwest-1", True),
        ("eusc-de-east-1", True),
        ("il-central-1", True),
        ("us-east-12", True),
        ("US-EAST-1", False),
        ("us-east", False),
        ("useast1", False),
        ("u-east-1", False),
        ("use-east-1", False),
        ("us-east-1\n", False),
        ("us-east-١", False),  # non-ASCII digit
        ("us--east-1", False),
        ("", False),
        ("MyStack", False),
    ],
)
def test_it_recognises_region_shapes(value, expected):
    assert is_region_shaped(value) is expected


def test_it_reads_run_id_timestamps():
    assert run_id_timestamp_ms("20261129T122811123Z-f37f3ced") == 1795955291123
    assert run_id_timestamp_ms("20260613T012345678Z-1a2b3c4d") == int(
        datetime(2026, 6, 13, 1, 23, 45, 678000, tzinfo=UTC).timestamp() * 1000
    )
    # cdkd matches the leading timestamp only; the suffix is not checked.
    assert run_id_timestamp_ms("20260613T012345678Z") == run_id_timestamp_ms("20260613T012345678Z-zz")
    assert run_id_timestamp_ms("19691231T235959999Z-00000000") == -1


@pytest.mark.parametrize(
    "run_id",
    [
        "",
        "index",
        "20260613T012345Z-1a2b3c4d",  # no millis
        "2026-06-13T01:23:45.678Z",  # not compact
        "x20260613T012345678Z-1a2b3c4d",
        "20261313T012345678Z-1a2b3c4d",  # month 13
        "20260230T012345678Z-1a2b3c4d",  # 30 February
        "20260613T256045678Z-1a2b3c4d",  # hour 25
        "２0260613T012345678Z-1a2b3c4d",  # fullwidth digit
    ],
)
def test_it_gives_none_for_undatable_run_ids(run_id):
    assert run_id_timestamp_ms(run_id) is None


def test_it_builds_run_ids_in_cdkds_format():
    now = datetime(2026, 6, 13, 1, 23, 45, 678901, tzinfo=UTC)
    run_id = new_run_id(now)
    stamp, suffix = run_id.split("-")
    assert stamp == "20260613T012345678Z"
    assert len(suffix) == 8 and all(c in "0123456789abcdef" for c in suffix)
    assert run_id_timestamp_ms(run_id) == 1781313825678
    assert new_run_id(now) != run_id  # the random suffix keeps concurrent runs apart


def test_it_builds_run_ids_in_utc():
    tokyo = timezone(timedelta(hours=9))
    assert new_run_id(datetime(2026, 6, 13, 10, 0, 0, tzinfo=tokyo)).startswith("20260613T010000000Z-")
    assert new_run_id(datetime(2026, 6, 13, 1, 0, 0)).startswith("20260613T010000000Z-")  # naive = UTC


def test_it_sorts_run_ids_chronologically():
    base = datetime(2026, 1, 1, tzinfo=UTC)
    ids = [new_run_id(base + timedelta(milliseconds=ms)) for ms in (0, 1, 999, 1000, 86_400_000)]
    assert sorted(ids) == ids
    fresh = new_run_id()
    stamp = run_id_timestamp_ms(fresh)
    assert stamp is not None
    assert abs(stamp - datetime.now(UTC).timestamp() * 1000) < 60_000
