"""The cluster side: the official `kubernetes` client, and every API error mapped in one place.

Objects travel as plain dicts, exactly as rendered and exactly as the API
returns them (`_preload_content=False`, then JSON), so what `--dry-run=client`
prints is what is sent, and what the watch sees is what tests record.

`kubernetes` is imported inside functions: `kdist --help`, `render` and
`validate` never pay for it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdist import labels as L
from kdist.errors import ClusterError, KdistError, UsageError

if TYPE_CHECKING:
    from kdist.options import ClusterOptions
    from kdist.watch import Sources

KF_GROUP, KF_VERSION, KF_PLURAL = "kubeflow.org", "v1", "pytorchjobs"
CONNECT_TIMEOUT = 10  # seconds to open a connection
REQUEST_TIMEOUT = (CONNECT_TIMEOUT, 60)  # (connect, read) for every plain request
WATCH_SECONDS = 60  # server-side timeoutSeconds of each watch; the read timeout is longer
LOG_READ_TIMEOUT = 120  # a log quiet this long is reconnected (and checked) once
FIELD_MANAGER = "kdist"
_RETRYABLE = {429, 500, 502, 503, 504}


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410), or the object is gone: relist."""


class Transient(Exception):
    """A dropped connection, a timeout, a 5xx/429: reconnect after a backoff."""


class OperatorMissing(ClusterError):
    """The cluster has no kubeflow.org/v1 PyTorchJob resource."""


class JobNotFound(KdistError):
    """The named job is not in the namespace: the user's input names nothing."""

    exit_code = 2


# ---- pure helpers -------------------------------------------------------------------------


def pod_rank(pod: dict[str, Any]) -> int | None:
    """A pod's node rank from its labels (never from its name).

    Indexed Job: the completion index (label, or annotation on older clusters).
    PyTorchJob: master is 0, worker i is i + 1.
    """
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    index = labels.get(L.COMPLETION_INDEX, annotations.get(L.COMPLETION_INDEX))
    if index is not None:
        return _int(index)
    replica_type = (labels.get(L.KF_REPLICA_TYPE) or "").lower()
    replica_index = _int(labels.get(L.KF_REPLICA_INDEX))
    if replica_type == "master":
        return 0
    if replica_type == "worker" and replica_index is not None:
        return replica_index + 1
    return None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def pod_selector(job: dict[str, Any]) -> str:
    """The label selector of `job`'s pods: kdist's label, else the controller's own."""
    meta = job.get("metadata") or {}
    name = meta.get("name", "")
    if (meta.get("labels") or {}).get(L.JOB_NAME) == name:
        return L.selector_string(name)
    if job.get("kind") == "PyTorchJob":
        return f"{L.KF_JOB_NAME}={name}"
    return f"batch.kubernetes.io/job-name={name}"


@dataclass(frozen=True)
class Action:
    """What was being done when the API answered: it names the error for the user."""

    verb: str
    resource: str  # plural, as RBAC spells it: jobs, services, pytorchjobs, pods, pods/log
    namespace: str | None = None
    name: str = ""


def _status(e: Any) -> dict[str, Any]:
    try:
        body = json.loads(getattr(e, "body", None) or "")
    except ValueError:
        return {}
    return body if isinstance(body, dict) and body.get("kind") == "Status" else {}


def api_error(e: BaseException, action: Action, server: str) -> KdistError:
    """The one place API failures become messages (and exit codes) for the user."""
    from kubernetes.client.exceptions import ApiException

    where = f"in namespace {action.namespace}" if action.namespace else "cluster-wide"
    if not isinstance(e, ApiException) or not e.status:
        reason = getattr(e, "reason", None) or e
        return ClusterError(f"cluster unreachable at {server}: {reason}")
    status = _status(e)
    message = status.get("message") or (e.body or e.reason or "").strip()
    details = status.get("details") or {}
    if e.status == 409 and action.verb == "create":
        other = "" if action.resource in ("jobs", KF_PLURAL) else f" ({action.resource} "\
            f"{action.name} is there)"
        return ClusterError(
            f"job {action.name} already exists {where}{other}: use --replace or "
            f"`kdist delete {action.name}`")
    if e.status == 403:
        return ClusterError(f"forbidden: {action.verb} {action.resource} {where}: {message}")
    if e.status == 401:
        return ClusterError(f"unauthorized: {server} refused the kubeconfig's credentials")
    if e.status == 404 and action.resource == KF_PLURAL and not details.get("name"):
        return OperatorMissing("the Kubeflow training operator is not installed (no "
                               f"{KF_GROUP}/{KF_VERSION} PyTorchJob resource)")
    if e.status == 404 and details.get("kind") == "namespaces":
        return ClusterError(f"namespace {action.namespace} not found")
    if e.status == 404:
        return JobNotFound(f"no {action.resource} {action.name} {where}")
    if e.status == 422:
        causes = [f"{c.get('field', '?')}: {c.get('message', '')}"
                  for c in details.get("causes") or []]
        return ClusterError(f"the API server refused {action.resource} {action.name}: "
                            + ("; ".join(causes) or message))
    return ClusterError(
        f"{action.verb} {action.resource} {action.name} {where}: {e.status} "
        f"{status.get('reason') or e.reason}: {message}".replace("  ", " "))


def _transport_errors() -> tuple[type[BaseException], ...]:
    import urllib3

    return (urllib3.exceptions.HTTPError, OSError)


def _is_transient(e: BaseException) -> bool:
    from kubernetes.client.exceptions import ApiException

    if isinstance(e, ApiException):
        return e.status in _RETRYABLE or not e.status
    return isinstance(e, _transport_errors())


# ---- kubeconfig -----------------------------------------------------------------------------


def _kubeconfig_path(opts: ClusterOptions) -> str:
    from kubernetes.config.kube_config import KUBE_CONFIG_DEFAULT_LOCATION

    return opts.kubeconfig or os.path.expanduser(KUBE_CONFIG_DEFAULT_LOCATION)


def _kubeconfig_exists(opts: ClusterOptions) -> bool:
    """Whether any file of the (possibly colon-separated) kubeconfig path exists."""
    return any(Path(p).exists() for p in _kubeconfig_path(opts).split(os.pathsep) if p)


def _in_cluster(opts: ClusterOptions) -> bool:
    return (not opts.kubeconfig and not _kubeconfig_exists(opts)
            and bool(os.environ.get("KUBERNETES_SERVICE_HOST")))


def _no_kubeconfig(opts: ClusterOptions) -> UsageError:
    path = _kubeconfig_path(opts)
    if opts.kubeconfig:
        return UsageError(f"{path}: kubeconfig not found")
    return UsageError(f"{path}: no kubeconfig (give --kubeconfig or set KUBECONFIG)")


def context_namespace(opts: ClusterOptions, *, missing_ok: bool = False) -> str | None:
    """The kubeconfig context's namespace (no network); None when it sets none."""
    from kubernetes import config

    if _in_cluster(opts):
        ns_file = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        return ns_file.read_text().strip() if ns_file.exists() else None
    path = _kubeconfig_path(opts)
    if not _kubeconfig_exists(opts):
        if missing_ok and not opts.kubeconfig:
            return None
        raise _no_kubeconfig(opts)
    try:
        contexts, current = config.list_kube_config_contexts(path)
        chosen = current if opts.context is None else next(
            (c for c in contexts if c.get("name") == opts.context), None)
        if chosen is None:
            raise config.ConfigException(f"no context named {opts.context!r}")
    except Exception as e:  # the client raises many kinds for a bad file
        raise UsageError(f"{path}: cannot use this kubeconfig: {e}") from None
    return (chosen.get("context") or {}).get("namespace")


def resolve_namespace(opts: ClusterOptions, job_namespace: str | None = None, *,
                      missing_ok: bool = False) -> str:
    """-n, else the job's metadata.namespace, else the context's, else "default"."""
    return (opts.namespace or job_namespace
            or context_namespace(opts, missing_ok=missing_ok) or "default")


# ---- the client -------------------------------------------------------------------------------


class Cluster:
    """One API server, as the kubeconfig (and --context) says."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self.api = api_client
        self.server: str = api_client.configuration.host
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.discovery = client.DiscoveryV1Api(api_client)

    @classmethod
    def connect(cls, opts: ClusterOptions) -> Cluster:
        """A client for the kubeconfig's cluster; a bad kubeconfig is a UsageError (exit 2)."""
        from kubernetes import client, config

        cfg = client.Configuration()
        if _in_cluster(opts):
            config.load_incluster_config(client_configuration=cfg)
            return cls(client.ApiClient(cfg))
        path = _kubeconfig_path(opts)
        if not _kubeconfig_exists(opts):
            raise _no_kubeconfig(opts)
        try:
            config.load_kube_config(config_file=path, context=opts.context,
                                    client_configuration=cfg, persist_config=False)
        except Exception as e:  # ConfigException, OSError, YAML errors, bad base64...
            raise UsageError(f"{path}: cannot use this kubeconfig: {e}") from None
        cfg.retries = 2
        return cls(client.ApiClient(cfg))

    # -- one raw call, errors mapped ------------------------------------------------------

    def call(self, action: Action, fn: Callable[..., Any], *args: Any,
             **kwargs: Any) -> dict[str, Any]:
        """`fn(*args, **kwargs)` as raw JSON; every failure becomes a KdistError."""
        resp = self._raw(action, fn, *args, **kwargs)
        try:
            return json.loads(resp.data or b"{}")
        finally:
            resp.release_conn()

    def _raw(self, action: Action, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        try:
            return fn(*args, _preload_content=False, **kwargs)
        except (ApiException, *_transport_errors()) as e:
            raise api_error(e, action, self.server) from None

    # -- create ---------------------------------------------------------------------------

    def create(self, objects: list[dict[str, Any]], *,
               dry_run: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
        """Create every object in order, all or nothing; returns them and the API's warnings.

        Objects after the first are owned by it (ownerReferences to its uid, known
        once it exists), so deleting the job removes everything. If one fails,
        the ones already created are deleted again.
        """
        created: list[dict[str, Any]] = []
        warnings: list[str] = []
        try:
            for obj in objects:
                if created:
                    obj = _owned_by(obj, created[0])
                made, said = self._create_one(obj, dry_run)
                created.append(made)
                warnings += said
        except BaseException as e:
            problems = [] if dry_run else self._rollback(created)
            if problems and isinstance(e, KdistError):
                raise ClusterError(f"{e}; undoing the submission failed too: "
                                   f"{'; '.join(problems)}") from e
            raise
        return created, warnings

    def _create_one(self, obj: dict[str, Any], dry_run: bool) -> tuple[dict[str, Any], list[str]]:
        meta = obj["metadata"]
        ns, kind = meta["namespace"], obj["kind"]
        extra = {"dry_run": "All"} if dry_run else {}
        extra["field_manager"] = FIELD_MANAGER
        if kind == "Job":
            action, fn, args = Action("create", "jobs", ns, meta["name"]), \
                self.batch.create_namespaced_job, (ns, obj)
        elif kind == "Service":
            action, fn, args = Action("create", "services", ns, meta["name"]), \
                self.core.create_namespaced_service, (ns, obj)
        elif kind == "PyTorchJob":
            action, fn, args = Action("create", KF_PLURAL, ns, meta["name"]), \
                self.custom.create_namespaced_custom_object, (KF_GROUP, KF_VERSION, ns,
                                                              KF_PLURAL, obj)
        else:
            raise ClusterError(f"kdist cannot create a {kind}")
        resp = self._raw(action, fn, *args, **extra)
        try:
            return json.loads(resp.data), _api_warnings(resp)
        finally:
            resp.release_conn()

    def _rollback(self, created: list[dict[str, Any]]) -> list[str]:
        """Delete what a failed submission created; returns what could not be deleted."""
        problems = []
        for obj in reversed(created):
            meta = obj["metadata"]
            try:
                self._delete_one(obj["kind"], meta["name"], meta["namespace"])
            except KdistError as e:
                problems.append(str(e))
        return problems

    # -- find, list, delete -----------------------------------------------------------------

    def get_job(self, name: str, namespace: str) -> dict[str, Any]:
        """The training object named `name`: a batch Job, else a PyTorchJob."""
        try:
            return self.call(Action("get", "jobs", namespace, name),
                             self.batch.read_namespaced_job, name, namespace)
        except JobNotFound:
            pass
        try:
            return self.call(Action("get", KF_PLURAL, namespace, name),
                             self.custom.get_namespaced_custom_object, KF_GROUP, KF_VERSION,
                             namespace, KF_PLURAL, name)
        except (JobNotFound, OperatorMissing):
            pass
        raise JobNotFound(f"no job {name} in namespace {namespace} (neither a Job nor a "
                          "PyTorchJob)")

    def list_jobs(self, namespace: str | None) -> list[dict[str, Any]]:
        """Every kdist job (both backends) in `namespace`, or in all when None."""
        sel = f"{L.MANAGED_BY}=kdist"
        if namespace is None:
            jobs = self.call(Action("list", "jobs"), self.batch.list_job_for_all_namespaces,
                             label_selector=sel)
        else:
            jobs = self.call(Action("list", "jobs", namespace), self.batch.list_namespaced_job,
                             namespace, label_selector=sel)
        items = [dict(j, kind="Job") for j in jobs.get("items") or []]
        try:
            if namespace is None:
                pt = self.call(Action("list", KF_PLURAL), self.custom.list_cluster_custom_object,
                               KF_GROUP, KF_VERSION, KF_PLURAL, label_selector=sel)
            else:
                pt = self.call(Action("list", KF_PLURAL, namespace),
                               self.custom.list_namespaced_custom_object, KF_GROUP, KF_VERSION,
                               namespace, KF_PLURAL, label_selector=sel)
            items += [dict(j, kind="PyTorchJob") for j in pt.get("items") or []]
        except OperatorMissing:
            pass
        return sorted(items, key=lambda j: (j["metadata"].get("namespace", ""),
                                            j["metadata"]["name"]))

    def delete(self, name: str, namespace: str, *, wait: bool = True,
               timeout: float = 300) -> list[str]:
        """Delete job `name` (foreground), its Service and pods; optionally wait until gone.

        Returns what was deleted (`job.batch/x`, ...). Works on jobs created by
        `kubectl apply` of the rendered manifests too (no ownerReference there).
        """
        deleted = []
        for kind in ("Job", "PyTorchJob", "Service"):
            if kind == "Service" and not self._is_kdist_service(name, namespace):
                continue
            try:
                self._delete_one(kind, name, namespace)
                deleted.append(f"{_KIND_REF[kind]}/{name}")
            except (JobNotFound, OperatorMissing):
                continue
        if not deleted:
            raise JobNotFound(f"no job {name} in namespace {namespace}")
        if wait:
            self.wait_gone(name, namespace, timeout)
        return deleted

    def _is_kdist_service(self, name: str, namespace: str) -> bool:
        try:
            svc = self.call(Action("get", "services", namespace, name),
                            self.core.read_namespaced_service, name, namespace)
        except JobNotFound:
            return False
        return (svc["metadata"].get("labels") or {}).get(L.JOB_NAME) == name

    def _delete_one(self, kind: str, name: str, namespace: str) -> None:
        fg = "Foreground"
        if kind == "Job":
            self.call(Action("delete", "jobs", namespace, name), self.batch.delete_namespaced_job,
                      name, namespace, propagation_policy=fg)
        elif kind == "Service":
            self.call(Action("delete", "services", namespace, name),
                      self.core.delete_namespaced_service, name, namespace, propagation_policy=fg)
        else:
            self.call(Action("delete", KF_PLURAL, namespace, name),
                      self.custom.delete_namespaced_custom_object, KF_GROUP, KF_VERSION,
                      namespace, KF_PLURAL, name, propagation_policy=fg)

    def wait_gone(self, name: str, namespace: str, timeout: float) -> None:
        """Block until no object of job `name` is left, by watching (not polling)."""
        from kdist.watch import wait_empty

        for source in self._leftover_sources(name, namespace):
            wait_empty(source, timeout)

    def _leftover_sources(self, name: str, namespace: str) -> list[ApiSource]:
        by_name, by_label = f"metadata.name={name}", L.selector_string(name)
        sources = [
            ApiSource(self, f"job {name}", Action("watch", "jobs", namespace, name),
                      self.batch.list_namespaced_job, namespace, field_selector=by_name),
            ApiSource(self, f"pods of {name}", Action("watch", "pods", namespace),
                      self.core.list_namespaced_pod, namespace, label_selector=by_label),
            ApiSource(self, f"services of {name}", Action("watch", "services", namespace),
                      self.core.list_namespaced_service, namespace, label_selector=by_label),
            ApiSource(self, f"endpointslices of {name}",
                      Action("watch", "endpointslices", namespace),
                      self.discovery.list_namespaced_endpoint_slice, namespace,
                      label_selector=by_label),
        ]
        if self._has_pytorchjobs():
            sources.insert(1, ApiSource(
                self, f"pytorchjob {name}", Action("watch", KF_PLURAL, namespace, name),
                self.custom.list_namespaced_custom_object, KF_GROUP, KF_VERSION, namespace,
                KF_PLURAL, field_selector=by_name))
        return sources

    def _has_pytorchjobs(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        try:
            resources = self.call(Action("get", "apiresources"),
                                  self.custom.get_api_resources, KF_GROUP, KF_VERSION)
        except (ClusterError, ApiException):
            return False
        return any(r.get("name") == KF_PLURAL for r in resources.get("resources") or [])

    # -- pods and logs ------------------------------------------------------------------------

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return self.call(Action("list", "pods", namespace), self.core.list_namespaced_pod,
                         namespace, label_selector=selector).get("items") or []

    def read_log(self, pod: str, namespace: str, tail: int | None = None) -> list[str]:
        """The main container's log lines (non-following)."""
        kwargs = {"tail_lines": tail} if tail is not None else {}
        resp = self._raw(Action("get", "pods/log", namespace, pod),
                         self.core.read_namespaced_pod_log, pod, namespace, container="pytorch",
                         **kwargs)
        try:
            return resp.data.decode("utf-8", "replace").splitlines()
        finally:
            resp.release_conn()

    def sources(self, job: dict[str, Any]) -> Sources:
        """The job watch, the pod watch and the log reader that `watch.Session` needs."""
        from kdist.watch import Sources

        meta = job["metadata"]
        name, ns = meta["name"], meta["namespace"]
        by_name = f"metadata.name={name}"
        if job.get("kind") == "PyTorchJob":
            job_source = ApiSource(self, f"pytorchjob {name}", Action("watch", KF_PLURAL, ns, name),
                                   self.custom.list_namespaced_custom_object, KF_GROUP,
                                   KF_VERSION, ns, KF_PLURAL, field_selector=by_name)
        else:
            job_source = ApiSource(self, f"job {name}", Action("watch", "jobs", ns, name),
                                   self.batch.list_namespaced_job, ns, field_selector=by_name)
        pods = ApiSource(self, f"pods of {name}", Action("watch", "pods", ns),
                         self.core.list_namespaced_pod, ns, label_selector=pod_selector(job))
        return Sources(job=job_source, pods=pods, logs=PodLogs(self, ns))


_KIND_REF = {"Job": "job.batch", "PyTorchJob": "pytorchjob.kubeflow.org", "Service": "service"}


def _owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> dict[str, Any]:
    """A copy of `obj` owned by `owner` (garbage-collected with it; foreground waits for it)."""
    ref = {
        "apiVersion": owner["apiVersion"], "kind": owner["kind"],
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    meta = dict(obj["metadata"], ownerReferences=[ref])
    return dict(obj, metadata=meta)


def _api_warnings(resp: Any) -> list[str]:
    """The API server's `Warning:` headers (PodSecurity, deprecations), as text."""
    headers = getattr(resp, "headers", None)
    values = headers.getlist("Warning") if hasattr(headers, "getlist") else []
    out = []
    for v in values:
        code, _, rest = v.partition(" ")
        _agent, _, text = rest.partition(" ")
        out.append(text.strip().strip('"') if code.isdigit() else v)
    return out


# ---- watch and log sources --------------------------------------------------------------------


def _lines(resp: Any) -> Iterator[str]:
    """Lines of a streamed HTTP body (watch events or log lines), undecoded JSON."""
    buf = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace")
    if buf:
        yield buf.decode("utf-8", "replace")


class ApiSource:
    """A list/watch pair of one resource under one selector (a `watch.Source`)."""

    def __init__(self, cluster: Cluster, what: str, action: Action,
                 fn: Callable[..., Any], *args: Any, **selectors: Any) -> None:
        self.cluster, self.what, self.action = cluster, what, action
        self.fn, self.args, self.selectors = fn, args, selectors

    def _open(self, **kwargs: Any) -> Any:
        """The raw response; 410 -> Gone, transient failures -> Transient, else mapped."""
        from kubernetes.client.exceptions import ApiException

        try:
            return self.fn(*self.args, **self.selectors, _preload_content=False, **kwargs)
        except ApiException as e:
            if e.status == 410:
                raise Gone() from None
            if _is_transient(e):
                raise Transient(f"{e.status} {e.reason}") from None
            raise api_error(e, self.action, self.cluster.server) from None
        except _transport_errors() as e:
            raise Transient(f"{self.cluster.server}: {e}") from None

    def list(self) -> tuple[list[dict[str, Any]], str]:
        resp = self._open(_request_timeout=REQUEST_TIMEOUT)
        try:
            body = json.loads(resp.data)
        except _transport_errors() as e:
            raise Transient(str(e)) from None
        finally:
            resp.release_conn()
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    def watch(self, resource_version: str) -> Iterator[dict[str, Any]]:
        """Events from `resource_version` on, for at most WATCH_SECONDS (then it ends)."""
        resp = self._open(watch=True, resource_version=resource_version,
                          allow_watch_bookmarks=True, timeout_seconds=WATCH_SECONDS,
                          _request_timeout=(CONNECT_TIMEOUT, WATCH_SECONDS + 30))
        try:
            for line in _lines(resp):
                if line.strip():
                    yield json.loads(line)
        except _transport_errors() as e:
            raise Transient(str(e)) from None
        except ValueError as e:  # a cut mid-event
            raise Transient(f"malformed watch event: {e}") from None
        finally:
            resp.release_conn()


class PodLogs:
    """Log reading for `watch.follow_log`, in one namespace."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace

    def stream_log(self, pod: str, *, follow: bool, tail: int | None,
                   since_seconds: int | None) -> Iterator[str]:
        """Timestamped lines (`<RFC3339> <text>`); ends quietly on a read timeout."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        kwargs: dict[str, Any] = {"follow": follow, "timestamps": True, "container": "pytorch"}
        if tail is not None:
            kwargs["tail_lines"] = tail
        if since_seconds is not None:
            kwargs["since_seconds"] = since_seconds
        try:
            resp = self.cluster.core.read_namespaced_pod_log(
                pod, self.namespace, _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, LOG_READ_TIMEOUT), **kwargs)
        except ApiException as e:
            if e.status == 404:
                raise Gone() from None
            if e.status == 400 or _is_transient(e):  # 400: container not started (yet/again)
                raise Transient(f"{e.status} {e.reason}") from None
            raise api_error(e, Action("get", "pods/log", self.namespace, pod),
                            self.cluster.server) from None
        except _transport_errors() as e:
            raise Transient(str(e)) from None
        try:
            yield from _lines(resp)
        except urllib3.exceptions.ReadTimeoutError:
            return  # quiet for LOG_READ_TIMEOUT: the caller checks and reconnects
        except _transport_errors() as e:
            raise Transient(str(e)) from None
        finally:
            resp.release_conn()

    def container_instance(self, pod: str) -> tuple[bool, int] | None:
        try:
            obj = self.cluster.call(Action("get", "pods", self.namespace, pod),
                                    self.cluster.core.read_namespaced_pod, pod, self.namespace)
        except JobNotFound:
            return None
        for cs in (obj.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") == "pytorch":
                return "running" in (cs.get("state") or {}), int(cs.get("restartCount") or 0)
        return None
