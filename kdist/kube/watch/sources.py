"""The cluster as the watch loop (`kdist.kube.watch.reflector`) reads it: list/watch and logs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kdist import backends
from kdist.kube import kinds
from kdist.kube.client import LOG_READ_TIMEOUT, WATCH_SECONDS, Cluster
from kdist.kube.errors import Action, Gone, HttpError, Transient, api_error
from kdist.kube.watch import answers
from kdist.kube.watch.objects import count, pod_selector
from kdist.kube.watch.reflector import Sources
from kdist.shared import jsonread
from kdist.shared.errors import JobNotFound
from kdist.shared.limits import MAX_EVENT_BYTES

_SELECTORS = {"label_selector": "labelSelector", "field_selector": "fieldSelector"}


class ApiSource:
    """A list/watch pair of one kind under one selector (a `reflector.Source`)."""

    def __init__(self, cluster: Cluster, kind: kinds.Kind, namespace: str | None,
                 **selectors: str) -> None:
        self.cluster, self.kind, self.namespace = cluster, kind, namespace
        self.query = {_SELECTORS[k]: v for k, v in selectors.items()}
        self.path = kind.collection(namespace)
        what = selectors.get("field_selector", "").removeprefix("metadata.name=")
        self.what = f"{kind.kind.lower()} {what}".strip() if what else \
            f"{kind.plural} ({', '.join(self.query.values())})"
        self.action = Action("watch", kind.plural, namespace)

    def list(self) -> tuple[list[dict[str, Any]], str]:
        body = self.cluster.request(Action("list", self.kind.plural, self.namespace), "GET",
                                    self.path, self.query, transient=True)
        items = answers.listed(body, self.kind, f"the list of {self.what}")
        meta = body.get("metadata")
        rv = (meta.get("resourceVersion") if isinstance(meta, dict) else None) or ""
        if not isinstance(rv, str):  # it goes into the watch's URL
            raise answers.refused(f"the list of {self.what}",
                                  f"metadata.resourceVersion is {rv!r}, not a string")
        return items, rv

    def watch(self, resource_version: str) -> Iterator[dict[str, Any]]:
        """Events from `resource_version` on, for at most WATCH_SECONDS (then it ends)."""
        query = dict(self.query, watch="true", resourceVersion=resource_version,
                     allowWatchBookmarks="true", timeoutSeconds=str(WATCH_SECONDS))
        try:
            for line in self.cluster.watch_lines(self.path, query, WATCH_SECONDS + 30,
                                                  self.action):
                if not line.strip():
                    continue
                try:
                    event = jsonread.loads(line, limit=MAX_EVENT_BYTES)
                except jsonread.OutOfBounds as e:  # no cut makes this: the server's answer
                    raise answers.refused(f"a watch event on {self.what}", str(e)) from None
                except ValueError as e:  # a cut mid-event
                    raise Transient(f"malformed watch event: {e}") from None
                yield answers.event(event, self.kind, f"a watch event on {self.what}")
        except HttpError as e:
            if e.status == 410:
                raise Gone() from None
            if e.status in (404, 400):
                raise api_error(e, self.action, self.cluster.server) from None
            raise Transient(f"{e.status} {e.reason}") from None


class PodLogs:
    """Log reading for `reflector.follow_log`, in one namespace."""

    def __init__(self, cluster: Cluster, namespace: str, container: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.container = container  # kdist's, as the job's backend names it

    def stream_log(self, pod: str, *, follow: bool, tail: int | None,
                   since_seconds: int | None) -> Iterator[str]:
        """Timestamped lines (`<RFC3339> <text>`); ends quietly on a read timeout."""
        import urllib3

        query: dict[str, Any] = {"follow": str(follow).lower(), "timestamps": "true",
                                 "container": self.container}
        if tail is not None:
            query["tailLines"] = tail
        if since_seconds is not None:
            query["sinceSeconds"] = since_seconds
        action = Action("get", "pods/log", self.namespace, pod)
        try:
            yield from self.cluster.watch_lines(kinds.POD.item(self.namespace, pod, "log"),
                                                query, LOG_READ_TIMEOUT, action)
        except HttpError as e:
            if e.status == 404:
                raise Gone() from None
            # 400: not started (yet/again); a 5xx: no node to read it from (kwok), for now
            raise Transient(f"the API server answered {e.status} {e.reason}") from None
        except Transient as e:
            if isinstance(e.__context__, urllib3.exceptions.ReadTimeoutError) or \
                    "timed out" in str(e).lower():
                return  # quiet for LOG_READ_TIMEOUT: the caller checks and reconnects
            raise

    def container_instance(self, pod: str) -> tuple[bool, int] | None:
        try:
            obj = self.cluster.get(kinds.POD, pod, self.namespace)
        except JobNotFound:
            return None
        for cs in (obj.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") == self.container:
                running = (cs.get("state") or {}).get("running") is not None
                return running, count(cs.get("restartCount"))
        return None


def job_sources(cluster: Cluster, job: dict[str, Any]) -> Sources:
    """The job watch, the pod watch and the log reader that `reflector.Session` needs."""
    from kdist.kube.watch.objects import gang_of
    from kdist.shared.labels import KUEUE_JOB_UID, QUEUE

    meta = job["metadata"]
    name, ns = meta["name"], meta["namespace"]
    queued = bool((meta.get("labels") or {}).get(QUEUE)) and cluster.serves(kinds.WORKLOAD)
    gang = gang_of(job)
    podgroup = kinds.podgroup(cluster.serves) if gang else None
    return Sources(
        job=ApiSource(cluster, kinds.of(job), ns, field_selector=f"metadata.name={name}"),
        pods=ApiSource(cluster, kinds.POD, ns, label_selector=pod_selector(job)),
        logs=PodLogs(cluster, ns, backends.of(job).container),
        queue=ApiSource(cluster, kinds.WORKLOAD, ns,
                        label_selector=f"{KUEUE_JOB_UID}={meta.get('uid', '')}")
        if queued else None,
        gang=ApiSource(cluster, podgroup, ns, field_selector=f"metadata.name={gang}")
        if podgroup else None)


def wait_gone(cluster: Cluster, name: str, namespace: str, timeout: float) -> None:
    """Block until no object of job `name` is left, by watching (not polling)."""
    from kdist.kube.watch.reflector import wait_empty
    from kdist.shared.labels import selector_string

    by_name, by_label = f"metadata.name={name}", selector_string(name)
    sources = [ApiSource(cluster, kind, namespace, field_selector=by_name)
               for kind in (*cluster.training_kinds(), *cluster.companion_kinds())]
    sources += [ApiSource(cluster, kind, namespace, label_selector=by_label)
                for kind in (kinds.POD, kinds.SERVICE, kinds.ENDPOINTSLICE, kinds.CONFIGMAP)]
    for source in sources:
        # A dead server fails this short wait within about two request deadlines.
        wait_empty(source, timeout, give_up_after=cluster.request_timeout)
