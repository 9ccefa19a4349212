"""Golden files: every example and case spec, rendered on both backends.

Regenerate after an intended change with `make golden`
(`python -m tests.unit.golden --update`) and review the diff.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kdist.rendering import render, to_yaml, with_backend
from kdist.spec import load_job

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden")
SPECS = sorted([*ROOT.joinpath("examples").glob("*.yaml"),
                *Path(__file__).with_name("cases").glob("*.yaml")])
BACKENDS = ("indexed-job", "pytorchjob")


def cases() -> list[tuple[Path, str, Path]]:
    """(spec, backend, golden file) for every combination."""
    return [(spec, b, GOLDEN / f"{spec.stem}.{b}.yaml") for spec in SPECS for b in BACKENDS]


def rendered(spec: Path, backend: str) -> str:
    return to_yaml(render(with_backend(load_job(spec), backend)))


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
