"""The registry of training kinds (backends): one line per kind, in lookup order.

Adding a kind is its module (`kdist.backends.<kind>`: the `Backend` interface in
`kdist.backends.base`), its template(s) in `templates/`, and one line below.
Everything else (spec.backend's choices, the CLI's --backend, rendering, the
watch, `kdist check`, RBAC, error words) asks here.
"""

from __future__ import annotations

from typing import Any

from kdist.backends import indexed_job, jobset, pytorchjob, trainjob
from kdist.backends.base import Backend
from kdist.shared.errors import UsageError
from kdist.shared.kind import Kind

#: Every backend, in the order a job's name is looked up (the first is the default).
BACKENDS: tuple[Backend, ...] = (
    indexed_job.BACKEND,
    pytorchjob.BACKEND,
    jobset.BACKEND,
    trainjob.BACKEND,
)
NAMES: tuple[str, ...] = tuple(b.name for b in BACKENDS)
DEFAULT = NAMES[0]
_BY_NAME = {b.name: b for b in BACKENDS}
_BY_KIND = {b.kind.kind: b for b in BACKENDS}
#: The training objects' kinds, in lookup order.
KINDS: tuple[Kind, ...] = tuple(b.kind for b in BACKENDS)


def get(name: str) -> Backend:
    """The backend named `name` (spec.backend)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UsageError(f"backend {name!r} is not one of {', '.join(NAMES)}") from None


def of_kind(kind: str) -> Backend | None:
    """The backend whose training object is of `kind` (None: not a training kind)."""
    return _BY_KIND.get(kind)


def holding(kind: str) -> Backend | None:
    """The backend whose rendered objects of `kind` hold its pod templates: the training
    object's, or a kind it creates first (a TrainJob's TrainingRuntime)."""
    return _BY_KIND.get(kind) or next(
        (b for b in BACKENDS if any(k.kind == kind for k in b.created_first)), None)


def creation_order(objects: list[dict[str, Any]]) -> list[int]:
    """The places of rendered `objects` (the training object first) in the order they are
    created or applied: what its backend's controller looks up when the training object is
    created (`Backend.created_first`) before it, the rest as rendered."""
    b = of_kind(str(objects[0].get("kind") or "")) if objects else None
    first = {k.kind for k in b.created_first} if b is not None else set()
    early = [i for i, o in enumerate(objects) if i and o.get("kind") in first]
    return early + [i for i in range(len(objects)) if i not in early]


def of(obj: dict[str, Any]) -> Backend:
    """The backend of a training object (a kind kdist does not make reads as an Indexed
    Job's: what the watch and tables did before they knew the kind)."""
    return _BY_KIND.get(str(obj.get("kind") or ""), BACKENDS[0])


def pod_rank(labels: dict[str, Any], annotations: dict[str, Any]) -> int | None:
    """A pod's node rank by whichever backend's labels it carries; a backend that claims
    the pod (a JobSet's, which is an Indexed Job's pod too) alone decides."""
    for b in BACKENDS:
        if b.claims_pod(labels):
            return b.pod_rank(labels, annotations)
    for b in BACKENDS:
        rank = b.pod_rank(labels, annotations)
        if rank is not None:
            return rank
    return None


def earlier_pods(labels: dict[str, Any], annotations: dict[str, Any]) -> int:
    """How many of a pod's rank's pods came before it, as its controllers count them."""
    return max(b.earlier_pods(labels, annotations) for b in BACKENDS)


def container(name: str) -> str:
    """kdist's container in the pods of backend `name` ("": not known yet, the default's)."""
    return get(name).container if name else BACKENDS[0].container


def able(capability: str) -> str:
    """The backends that have `capability` (a `Backend` flag), for an error's words."""
    return " or ".join(b.name for b in BACKENDS if getattr(b, capability))


def rbac_rules() -> list[dict[str, Any]]:
    """What kdist's Role needs for every training kind."""
    return [rule for b in BACKENDS for rule in b.rbac]
