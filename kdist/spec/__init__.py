"""The job spec: read a job.yaml safely, validate it into one frozen model.

    job = load_job("job.yaml")   # TrainingJob, or SpecError with every problem

Layers (docs/DESIGN.md): this package imports only ``kdist.shared``.

The names below are loaded when first used (PEP 562), not with the package: the cluster
verbs read a kubeconfig through ``kdist.spec.yamlsafe`` and never need the model, whose
import (pydantic and every field's checks) took 0.45 s of a `kdist status` here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kdist.spec.load import advice, load_job, parse_job, validate_job
    from kdist.spec.model import TrainingJob

__all__ = ["TrainingJob", "advice", "load_job", "parse_job", "validate_job"]


def __getattr__(name: str) -> Any:
    if name == "TrainingJob":
        from kdist.spec.model import TrainingJob

        return TrainingJob
    if name in ("advice", "load_job", "parse_job", "validate_job"):
        from kdist.spec import load

        return getattr(load, name)
    raise AttributeError(f"module 'kdist.spec' has no attribute {name!r}")
