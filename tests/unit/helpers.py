"""Shared builders for unit tests: a minimal valid spec and ways to vary it."""

from __future__ import annotations

import copy
from typing import Any

import yaml

BASE: dict[str, Any] = {
    "apiVersion": "kdist/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "unit-job"},
    "spec": {
        "image": "registry.example/kdist-train:0.1.0",
        "nodes": 2,
        "workload": {"module": "kdist.workloads.ddp", "args": ["--max-steps", "5"]},
    },
}


def spec_with(**changes: Any) -> dict[str, Any]:
    """BASE with dotted-path changes, e.g. spec_with(**{"spec.nodes": 3})."""
    doc = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = doc
        for p in parents:
            node = node.setdefault(p, {})
        if value is _DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return doc


_DELETE = object()
DELETE = _DELETE


def write_spec(tmp_path, doc: dict[str, Any] | str, name: str = "job.yaml"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path
