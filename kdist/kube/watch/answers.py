"""Cluster objects checked where they enter kdist: the fields kdist reads, as the API types them.

Every object kdist takes from the API server (a list's items, a watch event and
its object, a get's or a create's answer) passes through here first. A field
kdist reads must have the type the Kubernetes API gives it (null counts as
not set), and every object must have a name and a namespace; otherwise the
object is refused with one ClusterError line naming it (kind, name,
namespace) and the field. Past this point the readers (`objects`, `tracker`,
`state`, the tables) may trust the shapes they index into.

Fields kdist does not read are not looked at. Counts that kdist already reads
leniently (`restartCount`, `status.ready`, a job's node count, which
`objects.checked_job_nodes` judges) stay unchecked here.
"""

from __future__ import annotations

import json
from typing import Any

from kdist import backends
from kdist.backends.base import CONDITIONS, Map
from kdist.kube import kinds
from kdist.shared.errors import ClusterError

# A node of a shape: a type (str, int, dict, list), {field: node} (an object, fields not
# named are not looked at), [node] (a list of node) or Map(node). A training kind's own
# shape is its backend's (`kdist.backends`).
META = {"name": str, "namespace": str, "uid": str, "resourceVersion": str,
        "creationTimestamp": str, "deletionTimestamp": str, "labels": Map(str),
        "annotations": Map(str), "ownerReferences": [dict]}
STATE = {"waiting": {"reason": str, "message": str}, "running": dict,
         "terminated": {"exitCode": int, "reason": str, "message": str, "finishedAt": str}}
CONTAINER_STATUS = {"name": str, "image": str, "state": STATE, "lastState": STATE}
POD = {"spec": {"nodeName": str},
       "status": {"phase": str, "reason": str, "message": str, "conditions": CONDITIONS,
                  "containerStatuses": [CONTAINER_STATUS],
                  "initContainerStatuses": [CONTAINER_STATUS]}}
WORKLOAD = {"spec": {"queueName": str},
            "status": {"conditions": CONDITIONS, "admission": {"clusterQueue": str}}}
PODGROUP = {"spec": {"schedulingPolicy": {"gang": {"minCount": int}}},
            "status": {"conditions": CONDITIONS}}
SHAPES: dict[str, dict[str, Any]] = {
    "Pod": POD, "Workload": WORKLOAD, "PodGroup": PODGROUP,
    **{b.kind.kind: b.shape for b in backends.BACKENDS}}
_TYPE_WORDS = {str: "a string", int: "an integer", dict: "an object", list: "a list"}


class Malformed(Exception):
    """`path` of the object (`.a.b[0]`; "" for the object itself) holds `value`, not `want`."""

    def __init__(self, path: str, value: Any, want: str) -> None:
        super().__init__(path)
        self.path, self.value, self.want = path, value, want

    def words(self) -> str:
        return f"{self.path.lstrip('.') or 'the object'} is {_shown(self.value)}, not {self.want}"


def checked(obj: Any, kind: kinds.Kind, where: str) -> dict[str, Any]:
    """`obj` (a `kind`) when what kdist reads of it is well typed and it has a name and a
    namespace, else ClusterError naming it (by `where`, where it came from, when it has no
    name)."""
    if not isinstance(obj, dict):
        raise refused(where, f"{_shown(obj)} instead of an object")
    try:
        _walk(obj, {"kind": str, "apiVersion": str, "metadata": META, **SHAPES.get(kind.kind, {})})
    except Malformed as e:
        raise refused(_name(obj, kind) or where, e.words()) from None
    meta = obj.get("metadata") or {}
    for key in ("name", "namespace"):  # every kind kdist reads lives in a namespace
        if not meta.get(key):
            raise refused(_name(obj, kind) or where,
                          f"a {obj.get('kind') or kind.kind} without metadata.{key}")
    return obj


def listed(answer: dict[str, Any], kind: kinds.Kind, where: str) -> list[dict[str, Any]]:
    """A list answer's items, each checked and given its kind (built-in lists leave it out)."""
    items = answer.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise refused(where, f"items is {_shown(items)}, not a list")
    return [checked(dict(i, kind=kind.kind) if isinstance(i, dict) else i, kind,
                    f"{where}, item {n}") for n, i in enumerate(items)]


def event(raw: Any, kind: kinds.Kind, where: str) -> dict[str, Any]:
    """One watch event, its object checked: ADDED/MODIFIED/DELETED carry a `kind`, BOOKMARK
    a resourceVersion, ERROR a Status. Other types pass (the watch ignores them)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise refused(where, f"an event {_shown(raw)} without a type")
    obj, what = raw.get("object"), f"{where}, a {raw['type']} event"
    if raw["type"] in ("ADDED", "MODIFIED", "DELETED"):
        if isinstance(obj, dict) and "kind" not in obj:
            obj = dict(obj, kind=kind.kind)
        return dict(raw, object=checked(obj, kind, what))
    shape = {"BOOKMARK": {"metadata": {"resourceVersion": str}},
             "ERROR": {"code": int, "message": str}}.get(raw["type"])
    if shape is not None:
        if not isinstance(obj, dict):
            raise refused(what, f"{_shown(obj)} instead of an object")
        try:
            _walk(obj, shape)
        except Malformed as e:
            raise refused(what, e.words()) from None
    return raw


def discovered(answer: dict[str, Any], kind: kinds.Kind) -> bool:
    """Whether a discovery answer (an APIResourceList) lists `kind`'s resource; a
    `resources` that is not a list is refused, as any misshapen answer is."""
    resources = answer.get("resources")
    if resources is not None and not isinstance(resources, list):
        raise refused(f"the discovery of {kind.api_version}",
                      f"resources is {_shown(resources)}, not a list")
    return any(isinstance(r, dict) and r.get("name") == kind.plural for r in resources or [])


def created_problem(answer: dict[str, Any], sent: dict[str, Any],
                    dry_run: bool = False) -> str | None:
    """Why the API server's answer to creating `sent` is not a created object (misshapen,
    or no uid where it was persisted), or None. The object may exist all the same."""
    kind = kinds.of(sent)
    meta = sent["metadata"]
    where = f"the answer to creating {kind.kind} {meta['name']} in namespace {meta['namespace']}"
    try:
        checked(answer, kind, where)
    except ClusterError as e:
        return str(e)
    if not dry_run and not answer["metadata"].get("uid"):
        return str(refused(where, "no metadata.uid"))
    return None


def refused(what: str, problem: str) -> ClusterError:
    return ClusterError(f"a malformed answer from the API server ({what}): {problem}; "
                        "kdist does not read it")


def _walk(value: Any, shape: Any) -> None:
    """Raise Malformed at the first field of `value` that `shape` does not allow. Its path is
    spelled out on the way back up (`_at`), so a well-formed object costs no strings."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise Malformed("", value, "an object")
        for key, sub in shape.items():
            _at(value.get(key), sub, key)
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise Malformed("", value, "a list")
        for n, item in enumerate(value):
            _at(item, shape[0], n)
    elif isinstance(shape, Map):
        if not isinstance(value, dict):
            raise Malformed("", value, "an object")
        for key, item in value.items():
            _at(item, shape.value, key)
    elif not isinstance(value, shape) or (shape is int and isinstance(value, bool)):
        raise Malformed("", value, _TYPE_WORDS[shape])


def _at(value: Any, shape: Any, step: str | int) -> None:
    """`_walk` one member (a key, or a list index); null is "not set", as the API means it."""
    if value is None or (shape is str and type(value) is str):
        return
    try:
        _walk(value, shape)
    except Malformed as e:
        e.path = (f"[{step}]" if isinstance(step, int) else f".{step}") + e.path
        raise


def _name(obj: dict[str, Any], kind: kinds.Kind) -> str:
    """`Pod x in namespace y` for an object with a name, else ""."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or \
            not meta["name"]:
        return ""
    name, ns = meta["name"], meta.get("namespace")
    what = obj.get("kind") if isinstance(obj.get("kind"), str) else kind.kind
    return f"{what} {name}" + (f" in namespace {ns}" if isinstance(ns, str) and ns else "")


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
