"""The fake API server's objects: create, get, list, delete and the watch event log.

Modelled on what kube-apiserver does for the calls kdist makes: uids and a
cluster-wide resourceVersion are assigned on create, 409 on a duplicate name,
dryRun=All validates without storing, a foreground delete marks the object
(deletionTimestamp, the foregroundDeletion finalizer) and its dependents, and
the garbage collector removes them later. When "later" is decides `gc`:

- "on-watch" (default): pending deletions finish when a watch on that resource
  starts, so a client that does not watch never sees them go, and one that does
  sees exactly list (still there), watch (DELETED): deterministic sequences;
- "immediate": gone at once (what a background delete of a childless object does);
- "never": stuck (a finalizer that never clears), for timeouts.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.api.routes import KINDS, RESOURCES

Key = tuple[str, str, str]  # (plural, namespace, name)


def status_body(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    """A metav1.Status, as the API server sends with every error."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "details": details, "code": code}


def not_found(plural: str, name: str) -> dict[str, Any]:
    group = RESOURCES[plural][0].rpartition("/")[0] if plural in RESOURCES else ""
    what = f"{plural}.{group}" if group else plural
    return status_body(404, "NotFound", f'{what} "{name}" not found', name=name, group=group,
                       kind=plural)


class ApiStatus(Exception):
    """An error answer: the handler sends `body` with HTTP `body["code"]`."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body["message"])
        self.body = body


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    key: Key
    obj: dict[str, Any]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ---- selectors ------------------------------------------------------------------------------

_REQUIREMENT = re.compile(
    r"\s*(?P<neg>!)?(?P<key>[^\s,=!()]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<value>[^\s,()]*)|\s+(?P<setop>in|notin)\s*\((?P<set>[^)]*)\))?"
    r"\s*(?:,|$)")


def label_matcher(selector: str) -> Any:
    """A predicate on a labels dict for a Kubernetes label selector string."""
    checks = []
    pos = 0
    while pos < len(selector):
        m = _REQUIREMENT.match(selector, pos)
        if not m or m.end() == pos:
            raise ApiStatus(status_body(400, "BadRequest",
                                        f"unable to parse requirement: {selector!r}"))
        pos = m.end()
        key, op, value = m["key"], m["op"] or m["setop"], m["value"]
        if m["neg"]:
            checks.append(lambda labels, k=key: k not in labels)
        elif op in ("=", "=="):
            checks.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif op == "!=":
            checks.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif op in ("in", "notin"):
            values = {v.strip() for v in m["set"].split(",")}
            want = op == "in"
            checks.append(lambda labels, k=key, vs=values, w=want: (labels.get(k) in vs) == w)
        else:
            checks.append(lambda labels, k=key: k in labels)
    return lambda labels: all(c(labels) for c in checks)


def field_matcher(selector: str) -> Any:
    """metadata.name / metadata.namespace selectors, = == and !=, comma-joined."""
    checks = []
    for part in filter(None, selector.split(",")):
        m = re.fullmatch(r"(metadata\.name|metadata\.namespace)(==|=|!=)(.*)", part)
        if not m:
            raise ApiStatus(status_body(400, "BadRequest",
                                        f'"{part}" is not a known field selector'))
        field, op, value = m.groups()
        attr = field.split(".")[1]
        equal = op != "!="
        checks.append(lambda meta, a=attr, v=value, e=equal: (meta.get(a) == v) == e)
    return lambda meta: all(c(meta) for c in checks)


@dataclass
class Query:
    """Which objects a list or watch covers."""

    plural: str
    namespace: str | None  # None: every namespace
    label_selector: str = ""
    field_selector: str = ""

    def __post_init__(self) -> None:
        self._labels = label_matcher(self.label_selector)
        self._fields = field_matcher(self.field_selector)

    def matches(self, key: Key, obj: dict[str, Any]) -> bool:
        if key[0] != self.plural or (self.namespace is not None and key[1] != self.namespace):
            return False
        meta = obj.get("metadata") or {}
        return self._labels(meta.get("labels") or {}) and self._fields(meta)


# ---- the store ------------------------------------------------------------------------------


class Store:
    """Objects by (plural, namespace, name), an event log, and pod log texts."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.objects: dict[Key, dict[str, Any]] = {}
        self.events: list[Event] = []
        self.namespaces: set[str] = {"default", "kube-system"}
        self.logs: dict[tuple[str, str], str] = {}
        self.pending: set[Key] = set()  # marked for deletion, not yet gone
        self.gc = "on-watch"
        self._rv = 1000

    # -- fixture side ---------------------------------------------------------------------

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Put an object in place as if created earlier; returns the stored copy."""
        kind = obj.get("kind")
        if kind not in KINDS:
            raise ValueError(f"the fake API does not serve kind {kind!r}")
        api_version, plural = KINDS[kind]
        obj = copy.deepcopy(obj)
        obj.setdefault("apiVersion", api_version)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        with self.cond:
            self.namespaces.add(meta["namespace"])
            return copy.deepcopy(self._put(plural, obj, "ADDED"))

    def get_stored(self, plural: str, name: str, namespace: str = "default") -> dict | None:
        with self.cond:
            obj = self.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def names(self, plural: str, namespace: str = "default") -> list[str]:
        """Names of the stored objects, including ones being deleted."""
        with self.cond:
            return sorted(k[2] for k in self.objects if k[:2] == (plural, namespace))

    def alive(self, plural: str, namespace: str = "default") -> list[str]:
        """Names of the stored objects that are not being deleted."""
        with self.cond:
            return sorted(k[2] for k, o in self.objects.items() if k[:2] == (plural, namespace)
                          and not o["metadata"].get("deletionTimestamp"))

    # -- API side -------------------------------------------------------------------------

    def create(self, plural: str, namespace: str, body: Any, dry_run: bool) -> dict[str, Any]:
        api_version, kind = RESOURCES[plural]
        if not isinstance(body, dict) or body.get("kind") != kind:
            raise ApiStatus(status_body(400, "BadRequest",
                                        f"the body is not a {kind} (kind {body.get('kind')!r})"
                                        if isinstance(body, dict) else "the body is not JSON"))
        meta = body.get("metadata") or {}
        name = meta.get("name")
        if meta.get("namespace", namespace) != namespace:
            raise ApiStatus(status_body(
                400, "BadRequest", "the namespace of the provided object does not match the "
                "namespace sent on the request"))
        if not isinstance(name, str) or not name:
            raise ApiStatus(status_body(422, "Invalid", f"{kind} is invalid: metadata.name: "
                                        "Required value", kind=kind, causes=[
                                            {"field": "metadata.name",
                                             "message": "Required value"}]))
        with self.cond:
            if namespace not in self.namespaces:
                raise ApiStatus(status_body(404, "NotFound", f'namespaces "{namespace}" not found',
                                            name=namespace, kind="namespaces"))
            if (plural, namespace, name) in self.objects:
                group = api_version.rpartition("/")[0]
                raise ApiStatus(status_body(
                    409, "AlreadyExists", f'{plural}.{group} "{name}" already exists'
                    if group else f'{plural} "{name}" already exists',
                    name=name, group=group, kind=plural))
            obj = copy.deepcopy(body)
            obj["metadata"] = dict(meta, namespace=namespace)
            if dry_run:
                obj["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=_now())
                return obj
            return copy.deepcopy(self._put(plural, obj, "ADDED"))

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        with self.cond:
            obj = self.objects.get((plural, namespace, name))
            if obj is None:
                raise ApiStatus(not_found(plural, name))
            return copy.deepcopy(obj)

    def list(self, query: Query, limit: int = 0, cont: str = "") -> dict[str, Any]:
        """A list answer; with `limit`, one page of it and a continue token for the next
        (`cont`, a token an earlier page gave: the objects after the last one it had), as
        kube-apiserver pages a list (`metadata.continue`, `remainingItemCount`)."""
        api_version, kind = RESOURCES[query.plural]
        after: list[str] = []
        if cont:
            try:
                after = json.loads(base64.b64decode(cont.encode(), validate=True))["after"]
            except (ValueError, KeyError, TypeError):
                raise ApiStatus(status_body(400, "BadRequest", "continue key is not valid: "
                                            f"{cont[:40]!r}")) from None
        paged: dict[str, Any] = {}
        with self.cond:
            keys = [k for k, o in sorted(self.objects.items())
                    if query.matches(k, o) and (not after or list(k) > after)]
            if limit and len(keys) > limit:
                last = keys[limit - 1]
                paged = {"continue": base64.b64encode(json.dumps(
                    {"after": list(last)}).encode()).decode(),
                    "remainingItemCount": len(keys) - limit}
                keys = keys[:limit]
            items = [copy.deepcopy(self.objects[k]) for k in keys]
            rv = str(self._rv)
        if "/" not in api_version or api_version.startswith(("batch/", "discovery.k8s.io/")):
            for item in items:  # built-in lists omit each item's kind, as the API does
                item.pop("kind", None)
                item.pop("apiVersion", None)
        return {"kind": f"{kind}List", "apiVersion": api_version,
                "metadata": {"resourceVersion": rv, **paged}, "items": items}

    def delete(self, plural: str, namespace: str, name: str, propagation: str,
               dry_run: bool, uid: str | None = None) -> dict[str, Any]:
        """DELETE of one object; with `uid` (DeleteOptions.preconditions), a 409 Conflict
        when the object of that name has another uid, as kube-apiserver answers."""
        key = (plural, namespace, name)
        with self.cond:
            obj = self.objects.get(key)
            if obj is None:
                raise ApiStatus(not_found(plural, name))
            if uid is not None and uid != obj["metadata"]["uid"]:
                group = RESOURCES[plural][0].rpartition("/")[0]
                what = f"{plural}.{group}" if group else plural
                raise ApiStatus(status_body(
                    409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": '
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    f"{obj['metadata']['uid']}", name=name, group=group, kind=plural))
            if dry_run:
                return copy.deepcopy(obj)
            if propagation == "Foreground" and self.gc != "immediate":
                self._mark(key, "foregroundDeletion")
                for dep in self._dependents(obj["metadata"]["uid"]):
                    self._mark(dep, None)
                return copy.deepcopy(self.objects[key])
            self._remove(key)
            for dep in self._dependents(obj["metadata"]["uid"]):
                self._remove(dep)  # background: the garbage collector takes them at once
            return copy.deepcopy(obj)

    def merge_patch(self, plural: str, namespace: str, name: str, body: Any) -> dict[str, Any]:
        """A JSON merge patch (RFC 7396) of one object; a metadata.uid in it that is not the
        object's is a 409, as kube-apiserver answers."""
        key = (plural, namespace, name)
        with self.cond:
            obj = self.objects.get(key)
            if obj is None:
                raise ApiStatus(not_found(plural, name))
            uid = ((body or {}).get("metadata") or {}).get("uid")
            if uid is not None and uid != obj["metadata"]["uid"]:
                raise ApiStatus(status_body(409, "Conflict", f"Precondition failed: UID in "
                                            f"precondition: {uid}", name=name, kind=plural))
            return copy.deepcopy(self._put(plural, _merged(obj, body), "MODIFIED"))

    def delete_collection(self, query: Query) -> dict[str, Any]:
        """DELETE on a collection URL: every matching object goes (deletecollection)."""
        api_version, kind = RESOURCES[query.plural]
        with self.cond:
            keys = [k for k, o in sorted(self.objects.items()) if query.matches(k, o)]
            gone = [copy.deepcopy(self.objects[k]) for k in keys]
            for key in keys:
                self._remove(key)
        return {"kind": f"{kind}List", "apiVersion": api_version, "metadata": {}, "items": gone}

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace a stored object (a controller's status update): a MODIFIED event."""
        _, plural = KINDS[obj["kind"]]
        meta = obj["metadata"]
        with self.cond:
            old = self.objects[(plural, meta.get("namespace", "default"), meta["name"])]
            new = copy.deepcopy(obj)
            new["metadata"] = dict(old["metadata"], **{k: v for k, v in meta.items()
                                                       if k not in ("uid", "resourceVersion")})
            return copy.deepcopy(self._put(plural, new, "MODIFIED"))

    def watch(self, query: Query, since: str, seconds: float) -> Iterator[dict[str, Any]]:
        """Watch events for `query` after resourceVersion `since` (every object when empty or
        "0"), for `seconds`; pending deletions it covers finish as it starts (gc on-watch)."""
        deadline = time.monotonic() + seconds
        with self.cond:
            if self.gc == "on-watch":
                for key in [k for k in sorted(self.pending)
                            if query.matches(k, self.objects[k])]:
                    self._remove(key)
            if since in ("", "0"):
                start = self._rv
                initial = [{"type": "ADDED", "object": copy.deepcopy(o)}
                           for k, o in sorted(self.objects.items()) if query.matches(k, o)]
            else:
                start, initial = int(since), []
        yield from initial
        cursor = start
        while True:
            with self.cond:
                fresh = [e for e in self.events if e.rv > cursor]
                if not fresh:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self.cond.wait(left)
                    continue
                cursor = fresh[-1].rv
                out = [{"type": e.type, "object": copy.deepcopy(e.obj)} for e in fresh
                       if query.matches(e.key, e.obj)]
            yield from out

    def finish_deletions(self) -> None:
        """Let the garbage collector finish every pending deletion now."""
        with self.cond:
            for key in sorted(self.pending):
                self._remove(key)

    # -- internals (hold self.cond) -------------------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _put(self, plural: str, obj: dict[str, Any], event: str) -> dict[str, Any]:
        meta = obj["metadata"]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta["resourceVersion"] = self._next_rv()
        key = (plural, meta["namespace"], meta["name"])
        self.objects[key] = obj
        self._log(event, key, obj)
        return obj

    def _mark(self, key: Key, finalizer: str | None) -> None:
        obj = self.objects[key]
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") is None:
            meta["deletionTimestamp"] = _now()
            if finalizer:
                meta["finalizers"] = [*meta.get("finalizers", []), finalizer]
            meta["resourceVersion"] = self._next_rv()
            self._log("MODIFIED", key, obj)
        self.pending.add(key)

    def _remove(self, key: Key) -> None:
        obj = self.objects.pop(key, None)
        self.pending.discard(key)
        if obj is not None:
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._log("DELETED", key, obj)

    def _dependents(self, uid: str) -> list[Key]:
        return [k for k, o in sorted(self.objects.items())
                if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])]

    def _log(self, kind: str, key: Key, obj: dict[str, Any]) -> None:
        self.events.append(Event(int(obj["metadata"]["resourceVersion"]), kind, key,
                                 copy.deepcopy(obj)))
        self.cond.notify_all()


def _merged(target: Any, patch: Any) -> Any:
    """RFC 7396: objects merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merged(out.get(k), v)
    return out
