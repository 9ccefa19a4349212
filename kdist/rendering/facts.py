"""The spec facts annotation (`kdist.shared.facts`) of a job's training object."""

from __future__ import annotations

from kdist.rendering.contract import launch_argv
from kdist.shared.facts import ANNOTATION, Facts, max_steps_from_args
from kdist.spec.model import TrainingJob


def of(job: TrainingJob, *, code_sha256: str | None,
       runtime_sha256: str | None) -> dict[str, str]:
    """The training object's annotations: the facts, as one JSON value."""
    s = job.spec
    facts = Facts(max_steps=max_steps_from_args(launch_argv(job)),
                  max_restarts=s.distributed.max_restarts,
                  procs_per_node=s.procs_per_node if isinstance(s.procs_per_node, int) else None,
                  code=code_sha256 or "", runtime=runtime_sha256 or "",
                  spares=s.distributed.spares)
    return {ANNOTATION: facts.encode()}
