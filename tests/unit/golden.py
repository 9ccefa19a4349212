"""Golden files: every example and case spec, rendered on every backend (kdist.backends).

Regenerate after an intended change with `make golden`
(`python -m tests.unit.golden --update`) and review the diff.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import sys
from pathlib import Path
from typing import Any

from kdist import backends
from kdist.rendering import render, to_yaml, with_backend
from kdist.rendering.workdir import pack_workdir
from kdist.spec import load_job

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden")
SPECS = sorted([*ROOT.joinpath("examples").glob("*.yaml"),
                *Path(__file__).with_name("cases").glob("*.yaml")])
BACKENDS = backends.NAMES


def cases() -> list[tuple[Path, str, Path]]:
    """(spec, backend, golden file) for every combination."""
    return [(spec, b, GOLDEN / f"{spec.stem}.{b}.yaml") for spec in SPECS for b in BACKENDS]


def rendered(spec: Path, backend: str) -> str:
    job = with_backend(load_job(spec), backend)
    return to_yaml(zlib_neutral(render(job, pack_workdir(job))))  # spec.workdir: ConfigMaps too


def zlib_neutral(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ConfigMap parts as what they hold: gzip's bytes differ between zlib builds
    (zlib-ng, Apple's), the archive inside them does not (its hash is in the job too)."""
    for obj in objects:
        for key, data in (obj.get("binaryData") or {}).items():
            tar = gzip.decompress(base64.b64decode(data))
            obj["binaryData"][key] = f"<gzip of {len(tar)} tar bytes, sha256 " \
                                     f"{hashlib.sha256(tar).hexdigest()}>"
    return objects


def main() -> int:
    if sys.argv[1:] != ["--update"]:
        print("usage: python -m tests.unit.golden --update", file=sys.stderr)
        return 2
    GOLDEN.mkdir(exist_ok=True)
    for old in GOLDEN.glob("*.yaml"):
        old.unlink()
    for spec, backend, golden in cases():
        golden.write_text(rendered(spec, backend))
    print(f"wrote {len(cases())} golden files to {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
