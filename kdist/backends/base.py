"""What every training kind (a backend) tells the rest of kdist: one small interface.

A backend is the knowledge of one Kubernetes training object: which templates
render it, how its pods find node 0 and their rank, how to read its pods, node
count and phase back from the API, what RBAC and which CRD it needs. Nothing
outside `kdist.backends` names a kind's fields; rendering, the watch, `check`,
the CLI's choices and error words all ask the registry (`kdist.backends`).

Backends are pure: plain dicts in and out, no I/O, no Jinja, no spec model (the
rendering layer hands them what they need), so every layer above may ask them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kdist.shared import facts
from kdist.shared import labels as L
from kdist.shared.errors import ClusterError
from kdist.shared.kind import Kind
from kdist.shared.limits import MAX_NODES

SUCCEEDED, FAILED = "Succeeded", "Failed"


@dataclass(frozen=True)
class Map:
    """An object whose every value is `value` (labels, annotations, replica specs)."""

    value: Any


# The shapes `kdist.kube.watch.answers` checks answers against: a type (str, int, dict, list),
# {field: node} (an object, fields not named are not looked at), [node] or Map(node).
CONDITIONS = [{"type": str, "status": str, "reason": str, "message": str,
               "lastTransitionTime": str}]
POD_TEMPLATE = {"spec": {"containers": [{"name": str, "command": [str], "args": [str],
                                         "env": [{"name": str}]}],
                         "schedulingGroup": {"podGroupName": str}}}
#: The verbs kdist's commands use on a training object (submit, watch, status, the
#: goodput ledger's patch, delete).
TRAINING_VERBS = ["create", "get", "list", "watch", "patch", "delete"]


class Backend:
    """One training kind. Subclasses set the class attributes and override what differs."""

    #: spec.backend's value, the CLI's --backend choice.
    name: ClassVar[str]
    #: The training object (the first rendered; the watch, `delete` and `list` read it).
    kind: ClassVar[Kind]
    #: Jinja templates (`kdist/backends/templates/`), in creation order; the first renders
    #: the training object.
    templates: ClassVar[tuple[str, ...]]
    #: One line for spec.backend's description and `kdist check`.
    summary: ClassVar[str]
    #: Who serves the kind, for "not installed" errors ("" for a built-in kind).
    installs: ClassVar[str] = ""
    #: Restarts in place (a container restart rule on every pod, kdist.rendering.restarts).
    in_place_restarts: ClassVar[bool] = False
    #: A native gang (the pod template's schedulingGroup, kdist.rendering.gang).
    native_gang: ClassVar[bool] = False
    #: An elastic gang (spec.minNodes) and warm spares (spec.distributed.spares): its
    #: launchers re-form the gang in process, and its Job succeeds on some of its indexes
    #: (a successPolicy: minNodes, or the node ranks beside the spares) and ignores a
    #: fenced pod.
    elastic: ClassVar[bool] = False
    #: Why not, in the errors that refuse the three above.
    no_in_place_why: ClassVar[str] = ""
    no_gang_why: ClassVar[str] = ""
    no_elastic_why: ClassVar[str] = ""
    #: Why spec.distributed.maxRestarts does not bound its restarts ("": it does); a spec
    #: warning then asks for spec.activeDeadlineSeconds.
    unbounded_restarts: ClassVar[str] = ""
    #: What the kind cannot do that the others can, for `kdist check` and validate ("": none).
    caveats: ClassVar[str] = ""
    #: Kinds rendered after the training object that must exist before it (its controller
    #: looks them up when it is created): created first, then owned by it.
    created_first: ClassVar[tuple[Kind, ...]] = ()
    #: Words of its admission webhook's refusal of the training object while what was
    #: created first has not reached its controller's cache: that create is tried again
    #: (a server-side dry run cannot pass it, nothing being stored; it is skipped, said).
    settling: ClassVar[str] = ""
    #: Deleted in background propagation (its controller remakes what foreground deletes
    #: first while the object still exists).
    background_delete: ClassVar[bool] = False
    #: The named container port the rendezvous listens on.
    port_name: ClassVar[str] = "rendezvous"
    #: kdist's container in each pod (the launcher's): its logs, its status and its exit
    #: codes (podFailurePolicy) are read by this name. `pytorch` where the kind's controller
    #: does not ask for another (the training operator asks for that one).
    container: ClassVar[str] = "pytorch"
    #: Terminal conditions (status "True") of the kind: type -> Succeeded | Failed.
    terminal: ClassVar[dict[str, str]]
    #: RBAC rules kdist's Role needs for this kind (manifests/rbac.yaml).
    rbac: ClassVar[list[dict[str, Any]]]
    #: The shape `kdist.kube.watch.answers` checks an answer of this kind against (beyond
    #: metadata): only the members kdist reads.
    shape: ClassVar[dict[str, Any]]

    # -- rendering ------------------------------------------------------------------------

    def master_addr(self, name: str) -> str | None:
        """Node 0's DNS name for every pod, or None where the kind's controller says it."""
        return None

    def subdomain(self, name: str) -> str:
        """The pods' spec.subdomain ("" for none)."""
        return ""

    def slot_addr(self, name: str) -> str | None:
        """Each pod's stable DNS name, ``{slot}`` for its index (the store's host moves
        there when node 0 is lost: ``kdist.runtime.hostmove``), or None where there is no
        such name."""
        return None

    def rank_env(self, max_restarts: int) -> list[dict[str, str]]:
        """Env from the pod's own metadata (downward API): [{name, path}], paths as
        fieldRef.fieldPath. The node rank, and what the launcher counts restarts by."""
        return []

    def context(self, ctx: dict[str, Any]) -> dict[str, Any]:
        """What the kind's templates need beyond the shared context (`ctx`)."""
        return {}

    def rendered_kinds(self) -> list[str]:
        """The kinds its templates make, in order (checked after rendering)."""
        raise NotImplementedError

    def templates_for(self, ctx: dict[str, Any]) -> tuple[str, ...]:
        """The templates that render a job of context `ctx` (all of them but where the spec
        drops one: a TrainJob on an existing runtime makes no runtime of its own)."""
        return self.templates

    def kinds_for(self, ctx: dict[str, Any]) -> list[str]:
        """`rendered_kinds` of a job of context `ctx` (what `templates_for` makes)."""
        return self.rendered_kinds()

    # -- reading the API's objects ----------------------------------------------------------

    def pod_templates(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """Every pod template of a training object (as rendered, or as the API sent it)."""
        raise NotImplementedError

    def nodes(self, obj: dict[str, Any]) -> int | None:
        """How many node ranks the object has (None: it does not say); ClusterError when
        it says something no kdist job can have."""
        raise NotImplementedError

    def pod_rank(self, labels: dict[str, Any], annotations: dict[str, Any]) -> int | None:
        """A pod's node rank from its labels (never its name), None when not this kind's."""
        return None

    def claims_pod(self, labels: dict[str, Any]) -> bool:
        """Whether the pod is this kind's alone to rank (its controller's labels say so),
        though another kind's labels are on it too."""
        return False

    def earlier_pods(self, labels: dict[str, Any], annotations: dict[str, Any]) -> int:
        """How many of the rank's pods came before this one, as the kind's controllers
        count them on the pod (0: this kind says nothing)."""
        return 0

    def shape_note(self, obj: dict[str, Any]) -> str:
        """One line when `obj` is of a shape kdist does not write, and what of it is read
        (a table shows the rest as kdist would not): "" when it is kdist's shape."""
        return ""

    def own_pod_selector(self, name: str) -> str:
        """The controller's own label selector for the pods of `name` (for an object
        kdist did not label)."""
        raise NotImplementedError

    def suspended(self, obj: dict[str, Any]) -> bool:
        return bool(spec_of(obj).get("suspend"))

    def running(self, obj: dict[str, Any], conditions: dict[str, Any]) -> bool:
        """Whether the object says it runs (not yet over, not suspended)."""
        return count((obj.get("status") or {}).get("ready")) > 0


def spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def rank_int(value: Any) -> int | None:
    """A rank kdist can have (0 to MAX_NODES - 1), else None: a pod labelled otherwise is
    not one of kdist's ranks."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or \
            (isinstance(value, str) and not (value.isascii() and value.isdigit()
                                             and len(value) <= 6)):
        return None
    rank = int(value)
    return rank if 0 <= rank < MAX_NODES else None


def completion_index(labels: dict[str, Any], annotations: dict[str, Any]) -> int | None:
    """An Indexed Job pod's completion index (label, or annotation on older clusters)."""
    index = labels.get(L.COMPLETION_INDEX, annotations.get(L.COMPLETION_INDEX))
    return None if index is None else rank_int(index)


def index_failures(annotations: dict[str, Any]) -> int:
    """The Job controller's count of an Indexed Job pod's earlier pods that failed."""
    return sum(count(annotations.get(k)) for k in L.INDEX_FAILURES)


def count(value: Any) -> int:
    """A count from the cluster (restarts, ready pods): a non-negative int, else 0."""
    if isinstance(value, bool) or not isinstance(value, (int, str)) or len(str(value)) > 18:
        return 0
    try:
        return max(0, int(value))
    except ValueError:
        return 0


def node_count(obj: dict[str, Any], where: str, value: Any, minimum: int = 1) -> int:
    """`value` (the object's `where`) as a node count, else ClusterError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or \
            not minimum <= value <= MAX_NODES:
        raise bad_answer(obj, where, value)
    return value


def less_spares(obj: dict[str, Any], pods: int) -> int:
    """The node ranks of `pods` pods: warm spares (spec.distributed.spares, said in the
    object's facts annotation) are pods beyond them."""
    spares = facts.read((obj.get("metadata") or {}).get("annotations")).spares
    return pods - spares if 0 < spares < pods else pods


def bad_answer(obj: dict[str, Any], where: str, value: Any) -> ClusterError:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return ClusterError(
        f"the cluster's {obj.get('kind') or 'job'} {meta.get('name', '?')} in namespace "
        f"{meta.get('namespace', '?')} says {where} is {shown(value)}: not a node count a kdist "
        f"job can have (1 to {MAX_NODES}); kdist does not follow it")


def shown(value: Any) -> str:
    """A value from the cluster in an error or a note: its repr, at most 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def field_path(annotation: str) -> str:
    return f"metadata.annotations['{annotation}']"
