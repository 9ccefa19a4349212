"""The cluster client: raw JSON over the official client's configured connection.

Objects travel as plain dicts, exactly as rendered and exactly as the API
returns them, so what `--dry-run=client` prints is what is sent and what the
watch sees is what tests record. The `kubernetes` package supplies the
kubeconfig handling (TLS, tokens, exec plugins, in-cluster config) and its
urllib3 pool, with the proxy kdist chose (`kdist.kube.proxy`); messages name
the server without its user:password (`errors.redacted`). URLs come from
`kdist.kube.kinds` only, and every answer is checked to be the Kubernetes API's
(an HTML page is an error, not a crash). Each request is bounded by the request
timeout (default 15 s): a server that never answers fails the verb, one line.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from kdist.kube import kinds, owned
from kdist.kube.answers import checked, created_problem, listed
from kdist.kube.config import ClusterOptions, KubeConfig
from kdist.kube.errors import (
    RETRYABLE_STATUS,
    Action,
    HttpError,
    PartlyUndone,
    Transient,
    api_error,
    not_the_api,
    redacted,
    unreachable,
)
from kdist.kube.trust import check_token
from kdist.shared.errors import ClusterError, JobNotFound, KdistError, OperatorMissing
from kdist.shared.limits import MAX_ANSWER_BYTES, MAX_EVENT_BYTES

FIELD_MANAGER = "kdist"
CONNECT_TIMEOUT = 10.0
WATCH_SECONDS = 60  # server-side timeoutSeconds of each watch; the read timeout is longer
LOG_READ_TIMEOUT = 120  # a log quiet this long is reconnected (and checked) once


def _transport_errors() -> tuple[type[BaseException], ...]:
    import urllib3

    return (urllib3.exceptions.HTTPError, OSError)


class Cluster:
    """One API server, as the kubeconfig (and --context) says."""

    def __init__(self, configuration: Any, request_timeout: float) -> None:
        from kdist.kube.official import pieces

        rest = pieces()[2]
        self.configuration = configuration
        self._base = str(configuration.host).rstrip("/")  # what requests go to
        proxy = getattr(configuration, "proxy", None)
        #: The server as messages name it: no user:password, and the proxy in between.
        self.server: str = redacted(self._base) + (
            f" via the proxy {redacted(proxy)}" if proxy else "")
        self.request_timeout = request_timeout
        self._pool = rest.RESTClientObject(configuration).pool_manager
        self._served: dict[str, bool] = {}  # kind -> served, from discovery
        self._lock = threading.Lock()

    @classmethod
    def connect(cls, opts: ClusterOptions, kubeconfig: KubeConfig | None = None) -> Cluster:
        """A client for the kubeconfig's cluster; a bad kubeconfig is a UsageError (exit 2)."""
        kubeconfig = kubeconfig or KubeConfig.load(opts)
        assert kubeconfig is not None  # load() without missing_ok raises instead
        return cls(kubeconfig.configuration(), opts.timeout())

    # -- one request ---------------------------------------------------------------------

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "kdist"}
        if content_type:
            headers["Content-Type"] = content_type
        cfg = self.configuration
        token = cfg.get_api_key_with_prefix("authorization") or \
            cfg.get_api_key_with_prefix("BearerToken")
        if token:
            check_token(token, "the kubeconfig's credentials")  # a refreshed one too
            headers["Authorization"] = token
        return headers

    def open(self, method: str, path: str, query: dict[str, Any] | None = None,
             body: Any = None, *, read_timeout: float | None = None) -> Any:
        """The raw (unread) urllib3 response of one request; HttpError for a non-2xx answer.

        Transport failures (refused, reset, timed out) raise urllib3/OSError errors.
        """
        import urllib3

        url = self._base + path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        timeout = urllib3.Timeout(connect=min(CONNECT_TIMEOUT, self.request_timeout),
                                  read=read_timeout or self.request_timeout)
        resp = self._pool.request(
            method, url, body=data, preload_content=False, retries=False, timeout=timeout,
            headers=self._headers("application/json" if data is not None else None))
        if not 200 <= resp.status < 300:
            body_bytes = resp.read(1 << 20)
            resp.release_conn()
            raise HttpError(resp.status, resp.reason or "", body_bytes)
        return resp

    def request(self, action: Action, method: str, path: str,
                query: dict[str, Any] | None = None, body: Any = None, *,
                transient: bool = False) -> dict[str, Any]:
        """One request's JSON answer; every failure becomes a KdistError.

        With `transient`, a transport failure or a 429/5xx raises `Transient`
        instead, for a caller that retries (the watch loop).
        """
        try:
            resp = self.open(method, path, query, body)
            try:
                data = resp.read(MAX_ANSWER_BYTES + 1)
                if len(data) > MAX_ANSWER_BYTES:
                    raise ClusterError(f"the API server at {self.server} answered {method} "
                                       f"{path} with more than {MAX_ANSWER_BYTES >> 20} MiB")
                content_type = resp.headers.get("Content-Type", "")
                warnings = resp.headers.getlist("Warning") if hasattr(
                    resp.headers, "getlist") else []
            finally:
                resp.release_conn()
        except HttpError as e:
            if transient and e.status in RETRYABLE_STATUS:
                raise Transient(f"{e.status} {e.reason}") from None
            raise api_error(e, action, self.server) from None
        except _transport_errors() as e:
            if transient:
                raise Transient(str(unreachable(e, self.server, self.request_timeout))) from None
            raise unreachable(e, self.server, self.request_timeout) from None
        try:
            answer = json.loads(data or b"{}")
        except ValueError:
            raise not_the_api(self.server, f"{method} {path}", content_type, data) from None
        if not isinstance(answer, dict):
            raise not_the_api(self.server, f"{method} {path}", content_type, data)
        if warnings:
            answer = dict(answer)
            answer["__warnings__"] = [_warning_text(w) for w in warnings]
        return answer

    # -- create ---------------------------------------------------------------------------

    def create(self, objects: list[dict[str, Any]], *,
               dry_run: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
        """Create every object in order, all or nothing; returns them and the API's warnings.

        Objects after the first are owned by it (ownerReferences to its uid, known
        once it exists), so deleting the job removes everything. If one fails,
        the ones already created are deleted again: by the names kdist sent and
        the uids the server gave them (`undo`); an answer that names another
        object than the one sent is refused as malformed. Ctrl-C and SIGTERM wait
        for the request in flight (a POST cut short would leave an object kdist
        does not know it made), then the same rollback runs to its end, a second
        signal notwithstanding, and `Interrupted` says what it deleted and left.
        """
        from kdist.shared.signals import Interrupted, held

        created: list[dict[str, Any]] = []
        made: list[owned.Made] = []  # what to undo, by kdist's own names
        warnings: list[str] = []
        with held() as pending:
            try:
                for obj in objects:
                    if pending.signum is not None:
                        break
                    if made and not dry_run:
                        obj = owned.owned_by(obj, made[0])
                    answer = self._create_one(obj, dry_run)
                    done, malformed = owned.made(obj, answer, dry_run)
                    made.append(done)
                    problem = created_problem(answer, obj, dry_run)
                    if problem:  # it may exist all the same: the rollback below undoes it
                        raise ClusterError(problem)
                    if malformed:
                        raise ClusterError(
                            f"the API server at {self.server} answered the creation of "
                            f"{done.ref} in namespace {done.namespace} with {malformed}: a "
                            "malformed answer, not trusted")
                    warnings += answer.pop("__warnings__", [])
                    created.append(answer)
            except BaseException as e:
                _, left = ([], []) if dry_run else self.undo(made)
                if left and isinstance(e, KdistError):
                    raise PartlyUndone(f"{e}; undoing the submission failed too: "
                                       f"{'; '.join(left)}", left) from e
                raise
            if pending.signum is not None:
                undone, left = ([], []) if dry_run else self.undo(made)
                raise Interrupted(pending.signum, undone=undone, left=left)
        return created, warnings

    def _create_one(self, obj: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        kind, meta = kinds.of(obj), obj["metadata"]
        ns = meta["namespace"]
        query = {"fieldManager": FIELD_MANAGER, **({"dryRun": "All"} if dry_run else {})}
        return self.request(Action("create", kind.plural, ns, meta["name"]), "POST",
                            kind.collection(ns), query, obj)

    def undo(self, made: list[owned.Made]) -> tuple[list[str], list[str]]:
        """Delete what a failed submission created, last first: (what was deleted, what
        could not be, with why). Each goes by the name kdist sent and, where the server's
        answer gave one, with that uid as a precondition: an object of that name made
        meanwhile by anyone else is not deleted."""
        undone, left = [], []
        for m in reversed(made):
            try:
                self.delete_object(m.kind, m.name, m.namespace, uid=m.uid)
                undone.append(m.ref)
            except JobNotFound:
                undone.append(m.ref)  # gone already (its owner's)
            except KdistError as e:
                left.append(f"{m.ref} ({e})")
        return undone, left

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

    def serves(self, kind: kinds.Kind) -> bool:
        """Whether the cluster serves `kind` (asked once per kind, by discovery)."""
        with self._lock:
            if kind.kind not in self._served:
                try:
                    answer = self.request(Action("get", "apiresources"), "GET",
                                          kind.discovery())
                    found = any(r.get("name") == kind.plural
                                for r in answer.get("resources") or [] if isinstance(r, dict))
                except (JobNotFound, OperatorMissing):
                    found = False  # 404: no such API group here (no operator, no Kueue)
                self._served[kind.kind] = found
            return self._served[kind.kind]

    def has_pytorchjobs(self) -> bool:
        """Whether the Kubeflow training operator's PyTorchJob is installed."""
        return self.serves(kinds.PYTORCHJOB)

    def workloads_of(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """Kueue's Workloads of a queued job (none without Kueue or a queue label)."""
        from kdist.shared.labels import KUEUE_JOB_UID, QUEUE

        meta = job.get("metadata") or {}
        if not (meta.get("labels") or {}).get(QUEUE) or not self.serves(kinds.WORKLOAD):
            return []
        return self.list_objects(kinds.WORKLOAD, meta.get("namespace"),
                                 label_selector=f"{KUEUE_JOB_UID}={meta.get('uid', '')}")

    def training_kinds(self) -> list[kinds.Kind]:
        """The training kinds this cluster serves: Job, and PyTorchJob when installed."""
        return [k for k in kinds.TRAINING if k is not kinds.PYTORCHJOB or self.has_pytorchjobs()]

    def get_job(self, name: str, namespace: str) -> dict[str, Any]:
        """The training object named `name`: a batch Job, else a PyTorchJob."""
        for kind in self.training_kinds():
            try:
                return self.get(kind, name, namespace)
            except JobNotFound:
                continue
        raise JobNotFound(f"no job {name} in namespace {namespace} (neither a Job nor a "
                          "PyTorchJob)")

    def list_jobs(self, namespace: str | None) -> list[dict[str, Any]]:
        """Every kdist job (both backends) in `namespace`, or in all when None."""
        from kdist.shared.labels import MANAGED_BY

        items: list[dict[str, Any]] = []
        for kind in self.training_kinds():
            items += self.list_objects(kind, namespace, label_selector=f"{MANAGED_BY}=kdist")
        return sorted(items, key=lambda j: (j["metadata"].get("namespace", ""),
                                            j["metadata"]["name"]))

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.list_objects(kinds.POD, namespace, label_selector=selector)

    def read_log(self, pod: str, namespace: str, tail: int | None = None) -> list[str]:
        """The main container's log lines (non-following)."""
        query: dict[str, Any] = {"container": "pytorch"}
        if tail is not None:
            query["tailLines"] = tail
        action = Action("get", "pods/log", namespace, pod)
        try:
            resp = self.open("GET", kinds.POD.item(namespace, pod, "log"), query)
            try:
                return resp.read().decode("utf-8", "replace").splitlines()
            finally:
                resp.release_conn()
        except HttpError as e:
            raise api_error(e, action, self.server) from None
        except _transport_errors() as e:
            raise unreachable(e, self.server, self.request_timeout) from None

    # -- delete ---------------------------------------------------------------------------

    def delete(self, name: str, namespace: str) -> list[str]:
        """Delete job `name` (foreground), its Service and pods (`sources.wait_gone` waits).

        Returns what was deleted (`job.batch/x`, ...). Only kdist's objects go
        (`labels.made_by_kdist`): a Job or PyTorchJob of that name that kdist did
        not make is a UsageError before anything is deleted; a Service that is
        not kdist's is left alone. Each delete carries the uid that was checked,
        so an object put in its place meanwhile is not deleted either. Works on
        jobs created by `kubectl apply` of the rendered manifests too (no
        ownerReference there): their code ConfigMaps are found by label.
        """
        deleted = []
        for kind, uid in self._kdists_objects(name, namespace):
            try:
                self.delete_object(kind, name, namespace, uid=uid)
                deleted.append(f"{kind.ref}/{name}")
            except JobNotFound:
                continue  # deleted meanwhile
        deleted += self._delete_unowned_configmaps(name, namespace)
        if not deleted:
            raise JobNotFound(f"no job {name} in namespace {namespace}")
        return deleted

    def _kdists_objects(self, name: str, namespace: str) -> list[tuple[kinds.Kind, str | None]]:
        """The training objects and the Service named `name` that are kdist's, with their
        uids; UsageError when a training object of that name is not kdist's."""
        found: list[tuple[kinds.Kind, str | None]] = []
        for kind in (*self.training_kinds(), kinds.SERVICE):
            try:
                obj = self.get(kind, name, namespace)
            except (JobNotFound, OperatorMissing):
                continue
            if owned.is_kdists(kind, obj, name, namespace):
                found.append((kind, obj["metadata"].get("uid") or None))
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

    def delete_object(self, kind: kinds.Kind, name: str, namespace: str, *,
                      uid: str | None = None) -> None:
        """Delete one named object, foreground (its dependents first); with `uid`, only if
        the object of that name still is that one (else a 409, a ClusterError)."""
        self.request(Action("delete", kind.plural, namespace, name), "DELETE",
                     kind.item(namespace, name), body=owned.delete_options(uid))

    def watch_lines(self, path: str, query: dict[str, Any], read_timeout: float,
                    action: Action) -> Iterator[str]:
        """The lines of a streamed answer (watch events, a followed log).

        HttpError 410 and 404 pass through for the caller to read; transport
        failures and retryable statuses become `Transient`.
        """
        try:
            resp = self.open("GET", path, query, read_timeout=read_timeout)
        except HttpError as e:
            if e.status in (404, 410, 400) or e.status in RETRYABLE_STATUS:
                raise
            raise api_error(e, action, self.server) from None
        except _transport_errors() as e:
            raise Transient(f"{self.server}: {e}") from None
        try:
            buf = b""
            for chunk in resp.stream(amt=None, decode_content=True):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                if max(len(buf), *map(len, lines)) > MAX_EVENT_BYTES:  # no object is that big
                    raise ClusterError(f"the API server at {self.server} sent a line of more "
                                       f"than {MAX_EVENT_BYTES >> 20} MiB on {path}")
                for line in lines:
                    yield line.decode("utf-8", "replace")
            if buf:
                yield buf.decode("utf-8", "replace")
        except _transport_errors() as e:
            raise Transient(str(e)) from None
        finally:
            resp.release_conn()


_SELECTOR_PARAMS = {"label_selector": "labelSelector", "field_selector": "fieldSelector"}


def _warning_text(value: str) -> str:
    """An API server `Warning:` header (`299 - "text"`) as its text."""
    code, _, rest = value.partition(" ")
    _agent, _, text = rest.partition(" ")
    return text.strip().strip('"') if code.isdigit() else value
