"""The labels on every object kdist renders (keys from ``kdist.shared.labels``)."""

from __future__ import annotations

from kdist.shared.labels import BACKEND, COMPONENT, INSTANCE, MANAGED_BY, NAME, selector
from kdist.spec.model import TrainingJob


def object_labels(job: TrainingJob, component: str) -> dict[str, str]:
    """The user's labels, then kdist's (which win: the spec refuses the reserved keys)."""
    labels = dict(job.metadata.labels)
    labels.update({
        NAME: "kdist",
        INSTANCE: job.metadata.name,
        COMPONENT: component,
        MANAGED_BY: "kdist",
        BACKEND: job.spec.backend,
        **selector(job.metadata.name),
    })
    return labels
