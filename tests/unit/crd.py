"""Validate objects against a CustomResourceDefinition's openAPIV3Schema, strictly."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

# The CRDs of the operated backends, vendored so the suite runs offline anywhere: the
# Kubeflow training operator's v1.9.0 PyTorchJob, JobSet v0.12.0's JobSet and Kubeflow
# Trainer v2.3.0's TrainJob and runtimes (manifests/base/crds of its module).
SCHEMAS = Path(__file__).with_name("schemas")
PYTORCHJOB_CRD = SCHEMAS / "kubeflow.org_pytorchjobs.v1.9.0.yaml"
JOBSET_CRD = SCHEMAS / "jobset.x-k8s.io_jobsets.v0.12.0.yaml"
TRAINER = "trainer.kubeflow.org_{}.v2.3.0.yaml"
#: kind -> (CRD file, version): every custom kind kdist renders (and Trainer's cluster-wide
#: runtime, which a TrainJob may name instead of its own).
CRDS = {"PyTorchJob": (PYTORCHJOB_CRD, "v1"), "JobSet": (JOBSET_CRD, "v1alpha2"),
        **{kind: (SCHEMAS / TRAINER.format(plural), "v1alpha1") for kind, plural in (
            ("TrainJob", "trainjobs"), ("TrainingRuntime", "trainingruntimes"),
            ("ClusterTrainingRuntime", "clustertrainingruntimes"))}}


def _strict(schema: Any) -> Any:
    """Unknown fields are an error (the API server would silently prune them)."""
    if isinstance(schema, dict):
        schema = {k: _strict(v) for k, v in schema.items()}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_strict(s) for s in schema]
    return schema


@cache
def validator(crd_path: Path = PYTORCHJOB_CRD, version: str = "v1") -> jsonschema.Validator:
    crd = yaml.safe_load(crd_path.read_text())
    (ver,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = _strict(copy.deepcopy(ver["schema"]["openAPIV3Schema"]))
    # metadata is validated by the API server itself, not the CRD schema.
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def errors(obj: dict[str, Any]) -> list[str]:
    """What the CRD of `obj`'s kind (CRDS) refuses in it."""
    return [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator(*CRDS[obj["kind"]]).iter_errors(obj)
    ]
