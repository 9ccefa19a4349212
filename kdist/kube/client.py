"""The cluster client: raw JSON over the official client's configured connection.

Objects travel as plain dicts, exactly as rendered and exactly as the API
returns them, so what `--dry-run=client` prints is what is sent (ownerReferences
and the submission token aside, `kdist.kube.write.owned.sent_as`) and what the watch
sees is what tests record. The `kubernetes` package supplies the kubeconfig
handling (TLS, tokens, exec plugins, in-cluster config) and its urllib3 pool,
with the proxy kdist chose (`kdist.kube.connect.proxy`); messages name the server
without its user:password (`errors.redacted`). URLs come from `kdist.kube.kinds`
only, and every answer is checked to be the Kubernetes API's (an HTML page is an
error, not a crash). Each request ends by its deadline, the request timeout
(default 15 s), connecting and the whole answer included; answers are read in
bounded pieces, never past kdist's caps; a 429 asking for a short wait is sent
again (`kdist.kube.connect.transport`). A job's pods can be read a page at a time
(`list_pages`); pod logs are read by the base class, `kdist.kube.logreads`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from kdist import backends
from kdist.kube import kinds
from kdist.kube.connect import bodies
from kdist.kube.connect.config import ClusterOptions, KubeConfig
from kdist.kube.errors import (
    RETRYABLE_STATUS,
    Action,
    Gone,
    HttpError,
    MaybeDone,
    Transient,
    Unanswered,
    api_error,
    not_kubernetes,
    not_the_api,
)
from kdist.kube.logreads import LogReads
from kdist.kube.watch.answers import checked, discovered, listed, refused
from kdist.kube.write import owned
from kdist.shared import jsonread
from kdist.shared.errors import JobNotFound, OperatorMissing
from kdist.shared.limits import MAX_ANSWER_BYTES, MAX_EVENT_BYTES

WATCH_SECONDS = 60  # server-side timeoutSeconds of each watch; the read timeout is longer
MAX_PAGES = 1000  # of a paged list: a server that never stops continuing is refused
LOG_READ_TIMEOUT = 120  # a log quiet this long is reconnected (and checked) once


class Cluster(LogReads):
    """One API server, as the kubeconfig (and --context) says."""

    def __init__(self, configuration: Any, request_timeout: float) -> None:
        super().__init__(configuration, request_timeout)
        self._served: dict[str, bool] = {}  # kind -> served, from discovery
        self._lock = threading.Lock()
        self._kubernetes = False  # /version answered as the API server's does

    def _check_kubernetes(self, e: HttpError) -> None:
        """A 404 not in the API server's words (no Status body) may be a wrong URL or a
        proxy, which answers every path so: ask /version once, and say that rather than
        "no job" (ClusterError, exit 3) when it is no Kubernetes API server either."""
        if e.status != 404 or e.status_object() or self._kubernetes:
            return
        from kdist.kube.probe.verdict import ask_raw

        code, answer = ask_raw(self, "GET", "/version", None, {})
        if code != 200 or not isinstance(answer.get("gitVersion"), str):
            raise not_kubernetes(self.server, code)
        self._kubernetes = True

    def ask(self, method: str, path: str, body: Any = None,
            **query: str) -> tuple[int, dict[str, Any]]:
        """One request's HTTP status and JSON answer, whatever the status: what a probe
        (``kdist.kube.probe``) reads, for `kdist check` and a submit alike."""
        from kdist.kube.probe.verdict import ask_raw

        return ask_raw(self, method, path, body, query)

    @classmethod
    def connect(cls, opts: ClusterOptions, kubeconfig: KubeConfig | None = None) -> Cluster:
        """A client for the kubeconfig's cluster; a bad kubeconfig is a UsageError (exit 2)."""
        kubeconfig = kubeconfig or KubeConfig.load(opts)
        assert kubeconfig is not None  # load() without missing_ok raises instead
        return cls(kubeconfig.configuration(), opts.timeout())

    # -- one request ---------------------------------------------------------------------

    def request(self, action: Action, method: str, path: str,
                query: dict[str, Any] | None = None, body: Any = None, *,
                transient: bool = False) -> dict[str, Any]:
        """One request's JSON answer; every failure becomes a KdistError: `MaybeDone`
        for a create answered 5xx or unanswered once sent (it may have happened).

        With `transient`, a transport failure or a 429/5xx raises `Transient`
        instead, for a caller that retries (the watch loop).
        """
        def once() -> tuple[bytearray, str]:
            with self.exchange(method, path, query, body, what=action) as (resp, _):
                where = f"the API server at {self.server} answered {method} {path}"
                data = bodies.whole(bodies.pieces(resp, where), MAX_ANSWER_BYTES, where)
                return data, resp.headers.get("Content-Type", "")

        try:
            data, content_type = self.retrying(method, once)
        except HttpError as e:
            if e.status == 410 and "continue" in (query or {}):
                raise Gone() from None  # a paged list's snapshot expired between pages
            if transient and e.status in RETRYABLE_STATUS:
                raise Transient(f"{e.status} {e.reason}") from None
            self._check_kubernetes(e)
            error = api_error(e, action, self.server)
            raise MaybeDone(str(error)) if method == "POST" and e.status >= 500 else error \
                from None
        except Unanswered as u:
            if transient:
                raise Transient(str(u.error)) from None
            raise MaybeDone(str(u.error)) if method == "POST" and u.sent else u.error from None
        try:
            answer = jsonread.loads(data or b"{}", limit=MAX_ANSWER_BYTES)
        except jsonread.OutOfBounds as e:
            raise refused(f"the answer to {method} {path}", str(e)) from None
        except ValueError:
            raise not_the_api(self.server, f"{method} {path}", content_type, data) from None
        if not isinstance(answer, dict):
            raise not_the_api(self.server, f"{method} {path}", content_type, data)
        return answer

    # -- create ---------------------------------------------------------------------------

    def create(self, objects: list[dict[str, Any]], *,
               dry_run: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
        """Create every object in order, all or nothing (`kdist.kube.write.creating`); returns
        them and the API's warnings not reported yet."""
        from kdist.kube.write import creating

        return creating.create(self, objects, dry_run=dry_run)

    # -- read -----------------------------------------------------------------------------

    def get(self, kind: kinds.Kind, name: str, namespace: str) -> dict[str, Any]:
        obj = self.request(Action("get", kind.plural, namespace, name), "GET",
                           kind.item(namespace, name))
        return checked(dict(obj, kind=obj.get("kind") or kind.kind), kind,
                       f"the answer to GET {kind.kind} {name}")

    def list_objects(self, kind: kinds.Kind, namespace: str | None,
             **selectors: str) -> list[dict[str, Any]]:
        query = {_SELECTOR_PARAMS[k]: v for k, v in selectors.items()}
        answer = self.request(Action("list", kind.plural, namespace), "GET",
                              kind.collection(namespace), query)
        where = f"in namespace {namespace}" if namespace else "in every namespace"
        return listed(answer, kind, f"the list of {kind.plural} {where}")

    def list_pages(self, kind: kinds.Kind, namespace: str, limit: int,
                   **selectors: str) -> Iterator[list[dict[str, Any]]]:
        """`list_objects` in pages of at most `limit` items (limit and continue, as kubectl
        lists), each read when the last is used: one page's objects held at a time, all of
        one snapshot. `Gone` when that snapshot expired between pages (list again whole)."""
        query = {_SELECTOR_PARAMS[k]: v for k, v in selectors.items()}
        query["limit"] = str(limit)
        where = f"the list of {kind.plural} in namespace {namespace}"
        for page in range(MAX_PAGES):
            answer = self.request(Action("list", kind.plural, namespace), "GET",
                                  kind.collection(namespace), query)
            yield listed(answer, kind, f"{where}, page {page + 1}")
            token = (answer.get("metadata") or {}).get("continue") or ""
            if not token:
                return
            if not isinstance(token, str) or token == query.get("continue"):
                raise refused(where, f"page {page + 1} continues at {str(token)[:40]!r} "
                                     "again, or not at a string")
            query["continue"] = token
        raise refused(where, f"it goes on past {MAX_PAGES} pages of {limit}")

    def serves(self, kind: kinds.Kind) -> bool:
        """Whether the cluster serves `kind` (asked once per kind, by discovery)."""
        with self._lock:
            if kind.kind not in self._served:
                try:
                    answer = self.request(Action("get", "apiresources"), "GET",
                                          kind.discovery())
                    found = discovered(answer, kind)
                except (JobNotFound, OperatorMissing):
                    found = False  # 404: no such API group here (no operator, no Kueue)
                self._served[kind.kind] = found
            return self._served[kind.kind]

    def workloads_of(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """Kueue's Workloads of a queued job (none without Kueue or a queue label)."""
        from kdist.shared.labels import KUEUE_JOB_UID, QUEUE

        meta = job.get("metadata") or {}
        if not (meta.get("labels") or {}).get(QUEUE) or not self.serves(kinds.WORKLOAD):
            return []
        return self.list_objects(kinds.WORKLOAD, meta.get("namespace"),
                                 label_selector=f"{KUEUE_JOB_UID}={meta.get('uid', '')}")

    def podgroups_of(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """The PodGroup a job's pods are gang-scheduled in (distributed.gang native), if
        the pod template names one and it exists; none otherwise."""
        from kdist.kube.watch.objects import gang_of

        name, ns = gang_of(job), (job.get("metadata") or {}).get("namespace", "")
        if not name or not self.serves(kinds.PODGROUP):
            return []
        try:
            return [self.get(kinds.PODGROUP, name, ns)]
        except JobNotFound:
            return []

    def training_kinds(self) -> list[kinds.Kind]:
        """The training kinds this cluster serves (`kdist.backends`, in lookup order): a
        built-in kind always, an operator's where discovery finds it."""
        return [b.kind for b in backends.BACKENDS if not b.installs or self.serves(b.kind)]

    def get_job(self, name: str, namespace: str) -> dict[str, Any]:
        """The training object named `name`, of the first training kind that has one. An
        operator's kind is asked of discovery only once the kinds before it have no such
        job: a built-in Indexed Job costs one request, not one per operator first."""
        for b in backends.BACKENDS:
            kind = b.kind
            if b.installs and not self.serves(kind):
                continue
            try:
                obj = self.get(kind, name, namespace)
            except JobNotFound:
                continue
            if not owned.controlled(obj):  # else a part of a job of another kind
                return obj
        looked = " nor ".join(f"a {k.kind}" for k in self.training_kinds())
        raise JobNotFound(f"no job {name} in namespace {namespace} (neither {looked})"
                          if " nor " in looked else f"no job {name} in namespace {namespace}")

    def list_jobs(self, namespace: str | None, selector: str = "") -> list[dict[str, Any]]:
        """Every kdist job (every backend) in `namespace`, or in all when None; with a
        label `selector` (checked already), only those it matches."""
        from kdist.shared.labels import MANAGED_BY

        wanted = ",".join(s for s in (f"{MANAGED_BY}=kdist", selector) if s.strip())
        items: list[dict[str, Any]] = []
        for kind in self.training_kinds():
            items += self.list_objects(kind, namespace, label_selector=wanted)
        return sorted(items, key=lambda j: (j["metadata"].get("namespace", ""),
                                            j["metadata"]["name"]))

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.list_objects(kinds.POD, namespace, label_selector=selector)

    # -- delete ---------------------------------------------------------------------------

    def delete(self, name: str, namespace: str) -> list[str]:
        """Delete job `name` (foreground), its Service and pods (`sources.wait_gone` waits).

        Returns what was deleted (`job.batch/x`, ...). Only kdist's objects go
        (`labels.made_by_kdist`): a training object of that name that kdist did
        not make is a UsageError before anything is deleted; a Service that is
        not kdist's is left alone. Each delete carries the uid that was checked,
        so an object put in its place meanwhile is not deleted either. Works on
        jobs created by `kubectl apply` of the rendered manifests too (no
        ownerReference there): their code ConfigMaps are found by label.
        """
        from kdist.kube.watch.objects import gang_of

        deleted, gangs = [], set()
        for kind, obj in self._kdists_objects(name, namespace):
            gangs.add(gang_of(obj))
            try:
                self.delete_object(kind, name, namespace,
                                   uid=obj["metadata"].get("uid") or None)
                deleted.append(f"{kind.ref}/{name}")
            except JobNotFound:
                continue  # deleted meanwhile
        deleted += self._delete_unowned_configmaps(name, namespace)
        deleted += self._delete_unowned_companions(name, namespace)
        for gang in sorted(gangs - {""}):
            deleted += self._delete_unowned_podgroup(gang, name, namespace)
        if not deleted:
            raise JobNotFound(f"no job {name} in namespace {namespace}")
        return deleted

    def _kdists_objects(self, name: str,
                        namespace: str) -> list[tuple[kinds.Kind, dict[str, Any]]]:
        """The training objects and the Service named `name` that are kdist's, as read;
        UsageError when a training object of that name is not kdist's."""
        found: list[tuple[kinds.Kind, dict[str, Any]]] = []
        for kind in (*self.training_kinds(), kinds.SERVICE):
            try:
                obj = self.get(kind, name, namespace)
            except (JobNotFound, OperatorMissing):
                continue
            if not owned.controlled(obj) and owned.is_kdists(kind, obj, name, namespace):
                found.append((kind, obj))
        return found

    def _delete_unowned_configmaps(self, name: str, namespace: str) -> list[str]:
        """The code ConfigMaps of job `name` that no object owns (applied with kubectl).

        Owned ones go with their job (foreground: before it). Only kdist's labels
        select them, so a user's own ConfigMaps are never touched.
        """
        from kdist.shared.labels import made_by_kdist, selector_string

        deleted = []
        for cm in self.list_objects(kinds.CONFIGMAP, namespace,
                                    label_selector=selector_string(name)):
            meta = cm["metadata"]
            if meta.get("ownerReferences") or not made_by_kdist(cm, name):
                continue
            try:
                self.delete_object(kinds.CONFIGMAP, meta["name"], namespace,
                                   uid=meta.get("uid") or None)
                deleted.append(f"{kinds.CONFIGMAP.ref}/{meta['name']}")
            except JobNotFound:
                continue  # deleted meanwhile
        return deleted

    def companion_kinds(self) -> list[kinds.Kind]:
        """What the served training kinds are built from (`Backend.created_first`)."""
        served = self.training_kinds()
        return [k for b in backends.BACKENDS if b.kind in served for k in b.created_first]

    def _delete_unowned_companions(self, name: str, namespace: str) -> list[str]:
        """What job `name`'s training object is built from (a TrainJob's TrainingRuntime) when
        no object owns it (applied with kubectl; an owned one goes with its job)."""
        return [ref for kind in self.companion_kinds()
                for ref in self._delete_unowned(kind, name, name, namespace)]

    def _delete_unowned(self, kind: kinds.Kind, obj_name: str, name: str,
                        namespace: str) -> list[str]:
        """The `kind` `obj_name` of job `name` when no object owns it. One that is not job
        `name`'s (by kdist's labels), or that this user cannot read, stays."""
        from kdist.shared.errors import KdistError
        from kdist.shared.labels import made_by_kdist

        try:
            meta = self.get(kind, obj_name, namespace)["metadata"]
            if meta.get("ownerReferences") or not made_by_kdist({"metadata": meta}, name):
                return []
            self.delete_object(kind, obj_name, namespace, uid=meta.get("uid") or None)
        except KdistError:  # none there (JobNotFound), or not this user's to read
            return []
        return [f"{kind.ref}/{obj_name}"]

    def _delete_unowned_podgroup(self, group: str, name: str, namespace: str) -> list[str]:
        """The PodGroup `group` of job `name`'s native gang when no object owns it (a rendered
        job applied with kubectl; an owned one goes with its job)."""
        return self._delete_unowned(kinds.PODGROUP, group, name, namespace)

    def annotate(self, obj: dict[str, Any], annotations: dict[str, str]) -> None:
        """Set `annotations` on `obj` (a JSON merge patch), if it still is that object."""
        kind, meta = kinds.of(obj), obj["metadata"]
        body = {"metadata": {"annotations": annotations,
                             **({"uid": meta["uid"]} if meta.get("uid") else {})}}
        self.request(Action("patch", kind.plural, meta["namespace"], meta["name"]), "PATCH",
                     kind.item(meta["namespace"], meta["name"]), body=body)

    def delete_object(self, kind: kinds.Kind, name: str, namespace: str, *,
                      uid: str | None = None) -> None:
        """Delete one named object, foreground (its dependents first); with `uid`, only if
        the object of that name still is that one (else a 409, a ClusterError)."""
        b = backends.of_kind(kind.kind)
        self.request(Action("delete", kind.plural, namespace, name), "DELETE",
                     kind.item(namespace, name),
                     body=owned.delete_options(uid, b is not None and b.background_delete))

    def watch_lines(self, path: str, query: dict[str, Any], read_timeout: float,
                    action: Action) -> Iterator[str]:
        """The lines of a streamed answer (watch events, a followed log).

        HttpError 410 and 404 pass through for the caller to read; transport
        failures and retryable statuses become `Transient`. A watch's answer starts
        at once (the API server sends its headers first) and ends by `timeoutSeconds`:
        it gets the request timeout to start, then that long and a request timeout
        more. A followed log's headers come with its first line (the kubelet's), so it
        gets `read_timeout` to start, then no deadline but `read_timeout` for each read.
        """
        ends = query.get("timeoutSeconds")
        try:
            with self.exchange("GET", path, query, read_timeout=read_timeout,
                               deadline=None if ends else read_timeout,
                               what=action) as (resp, dog):
                dog.arm(float(ends) + self.request_timeout if ends else None)
                where = f"the API server at {self.server} answered GET {path}"
                for line in bodies.lines(bodies.pieces(resp, where), MAX_EVENT_BYTES, where):
                    yield line.decode("utf-8", "replace")
        except HttpError as e:
            if e.status in (404, 410, 400) or e.status in RETRYABLE_STATUS:
                raise
            raise api_error(e, action, self.server) from None
        except Unanswered as u:
            raise Transient(str(u.error)) from None


_SELECTOR_PARAMS = {"label_selector": "labelSelector", "field_selector": "fieldSelector"}
