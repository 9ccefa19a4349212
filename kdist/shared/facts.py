"""The spec facts the watch needs, written once at render time as one annotation on the
training object and read back from there (never out of container args or pod env, which
differ by backend and which a pod template overlay may change).

Standard library only: `kdist.rendering.facts` writes, `kdist.kube.watch.tracker` reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kdist.shared import jsonread
from kdist.shared.labels import DOMAIN

ANNOTATION = f"{DOMAIN}/facts"
_SHA = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Facts:
    """What the spec said: `--max-steps` of the workload (None: not given), the restart
    bound, processes per pod (None: "auto", one per GPU), the shipped code's and
    runtime's sha256 ("" when not shipped), warm spare pods beside the node ranks."""

    max_steps: int | None = None
    max_restarts: int | None = None
    procs_per_node: int | None = 1
    code: str = ""
    runtime: str = ""
    spares: int = 0

    def encode(self) -> str:
        doc: dict[str, Any] = {"maxSteps": self.max_steps, "maxRestarts": self.max_restarts,
                               "procsPerNode": self.procs_per_node}
        doc.update({k: v for k, v in (("codeSha256", self.code),
                                      ("runtimeSha256", self.runtime)) if v})
        if self.spares:
            doc["spares"] = self.spares
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def read(annotations: Mapping[str, Any] | None) -> Facts:
    """The facts an object's annotations carry; each one that is missing or not what
    kdist writes reads as unknown (an object kdist did not render, or one edited)."""
    raw = (annotations or {}).get(ANNOTATION)
    try:
        doc = jsonread.loads(raw, limit=4096) if isinstance(raw, str) else {}
    except ValueError:
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    # procsPerNode null is "auto" (unknown here); not said at all, the spec's default.
    procs = _count(doc.get("procsPerNode", 1), minimum=1)
    return Facts(max_steps=_count(doc.get("maxSteps")),
                 max_restarts=_count(doc.get("maxRestarts")), procs_per_node=procs,
                 code=_sha(doc.get("codeSha256")), runtime=_sha(doc.get("runtimeSha256")),
                 spares=_count(doc.get("spares", 0)) or 0)


def _count(value: Any, minimum: int = 0) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and minimum <= value < 2**63
    return value if ok else None


def _sha(value: Any) -> str:
    ok = isinstance(value, str) and len(value) == 64 and set(value) <= _SHA
    return value if ok else ""


def max_steps_from_args(args: Iterable[str]) -> int | None:
    """`--max-steps N` / `--max-steps=N` in a workload's arguments, if present."""
    args = list(args)
    for i, a in enumerate(args):
        value = None
        if a == "--max-steps" and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith("--max-steps="):
            value = a.split("=", 1)[1]
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    return None
