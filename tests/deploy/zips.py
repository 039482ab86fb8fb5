"""Zips of cdk.out fixtures for the upload tests (browser and views)."""

from __future__ import annotations

import io
import json
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "deploy"
SAMPLE = FIXTURES / "cdkd-0.284.40"
GOLDEN = SAMPLE / "assembly"  # what cdkd 0.284.40 deployed (the record in SAMPLE/state.json)
GOLDEN_CHANGED = FIXTURES / "synth" / "golden-changed.out"  # an in-place edit and a topic rename
NESTED = FIXTURES / "synth" / "nested-app.out"


def zip_entries(entries: dict[str, bytes], *, symlinks: tuple[str, ...] = ()) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, body in entries.items():
            info = zipfile.ZipInfo(name)
            if name in symlinks:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, body)
    return buf.getvalue()


def files_of(directory: Path, prefix: str = "") -> dict[str, bytes]:
    return {prefix + str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def zip_dir(directory: Path, *, template: Callable[[dict[str, Any]], None] | None = None, prefix: str = "") -> bytes:
    """The directory as a zip; `template` edits `<Stack>.template.json` (the first one) first."""
    files = files_of(directory, prefix)
    if template is not None:
        name = next(n for n in files if n.endswith(".template.json") and ".nested." not in n)
        doc = json.loads(files[name])
        template(doc)
        files[name] = json.dumps(doc, indent=1).encode()
    return zip_entries(files)


def with_stateful_replacement(doc: dict[str, Any]) -> None:
    """GoldenCdkStack's SSM parameter renamed: a create-only change of a stateful type, so a
    stateful replacement the first deploy engine refuses (a blocking reason)."""
    doc["Resources"]["Param165332EC"]["Properties"]["Name"] = "/golden/renamed"


def with_second_stack(directory: Path, account: str, name: str = "Other") -> bytes:
    """The assembly in `directory` with a second stack artifact, `name`, on the same
    template: a zip that holds two stacks, so a plan must be told which."""
    files = files_of(directory)
    manifest = json.loads(files["manifest.json"])
    manifest["artifacts"][name] = {
        "type": "aws:cloudformation:stack",
        "environment": f"aws://{account}/us-east-1",
        "properties": {"templateFile": "GoldenCdkStack.template.json", "stackName": name},
    }
    files["manifest.json"] = json.dumps(manifest).encode()
    return zip_entries(files)
