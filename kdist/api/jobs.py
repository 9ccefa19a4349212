"""One job at a time: submit, follow, wait, status, list, delete (its logs as they are
now: `ranklogs.py`).

Each takes the `Connection` of a `kdist.Client` (one kubeconfig read, one
connection pool) and arguments the client has already checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kdist.api.types import (
    Connection,
    Deleted,
    JobSummary,
    Observer,
    Quiet,
    Submission,
    reattach_hint,
)
from kdist.kube import kinds
from kdist.kube.connect.config import ClusterOptions, KubeConfig, resolve_namespace
from kdist.shared.errors import ClusterError, JobFailed, OperatorMissing, TimedOut, UsageError
from kdist.shared.limits import LOG_NODES
from kdist.shared.terminal import escape

if TYPE_CHECKING:
    from kdist.kube.client import Cluster
    from kdist.kube.watch.tracker import JobState
    from kdist.rendering.workdir import Packed
    from kdist.spec.model import TrainingJob

#: How long `submit(replace=True)` waits for the old job's objects to be gone.
DELETE_TIMEOUT = 300.0


def with_namespace(job: TrainingJob, opts: ClusterOptions,
                   kubeconfig: KubeConfig | None) -> TrainingJob:
    """The job with its namespace resolved: -n / metadata.namespace / context / default."""
    if opts.namespace and job.metadata.namespace and opts.namespace != job.metadata.namespace:
        raise UsageError(f"metadata.namespace is {job.metadata.namespace!r} but -n says "
                         f"{opts.namespace!r}")
    ns = resolve_namespace(opts, job.metadata.namespace, kubeconfig)
    if job.metadata.namespace == ns:
        return job
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"namespace": ns})})


def submit(conn: Connection, job: TrainingJob, *, wait: bool = True, replace: bool = False,
           dry_run: str | None = None, timeout: float | None = None, logs: bool = False,
           observer: Observer | None = None,
           on_submitted: Callable[[Submission], None] | None = None,
           code: Packed | None = None, all_nodes: bool = False) -> Submission:
    """Render `job` and create it, all or nothing; with `wait`, follow it to its end.

    `dry_run="client"` renders only (no cluster); `"server"` asks the API
    server to validate without persisting. `replace` deletes a kdist job of the
    same name first (`Cluster.delete`: only kdist's) and waits until it is gone.
    `on_submitted` hears of the created objects before the wait. With `wait`, a
    failed job raises JobFailed and a passed `timeout` raises TimedOut (the job
    keeps running). `all_nodes`: follow every node's log, not only nodes 0 to
    `LOG_NODES` - 1 (``kdist.shared.limits``). `code` is the packed workdir
    (``kdist.rendering.workdir.pack_workdir``); without it, spec.workdir is
    packed here. Its ConfigMaps are created after the job, owned by it.
    """
    from kdist.rendering import render

    if replace and dry_run == "server":
        raise UsageError("replace cannot be combined with a server dry run (it would delete)")
    opts = conn.options
    kubeconfig = conn.kubeconfig(missing_ok=dry_run == "client")
    job = with_namespace(job, opts, kubeconfig)
    name, ns = job.metadata.name, job.metadata.namespace or "default"
    if code is None and job.spec.workdir is not None:
        from kdist.rendering.workdir import pack_workdir

        code = pack_workdir(job)
    if dry_run == "client":  # no cluster to ask: auto renders recreate, and no gang
        return Submission(name, ns, render(job, code), dry_run="client")
    from kdist.kube.watch.sources import wait_gone
    from kdist.shared.errors import JobNotFound

    cluster = conn.cluster()
    replaced: list[str] = []
    if replace:
        try:
            replaced = cluster.delete(name, ns)
            wait_gone(cluster, name, ns, DELETE_TIMEOUT)
        except JobNotFound:
            pass
    created, warnings, notes = create(cluster, job, code, dry_run == "server")
    sub = Submission(name, ns, created, warnings, replaced, dry_run, notes=notes)
    if on_submitted is not None:
        on_submitted(sub)
    if not wait or dry_run:
        return sub
    state = follow(cluster, created[0], observer or Quiet(), logs=logs, timeout=timeout,
                   all_nodes=all_nodes)
    _check(state)
    return Submission(name, ns, created, warnings, replaced, None, state, notes)


def create(cluster: Cluster, job: TrainingJob, code: Packed | None,
           dry_run: bool) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Ask `cluster` what it serves (the backend's kind first), decide how `job` restarts
    and is scheduled there, then render it once and create it once (`Cluster.create`, all
    or nothing); returns the objects, the API's warnings and kdist's notes on what it chose.

    Restarts: where the spec may restart in place (restartMode auto or inPlace), the
    restart-rules probe of `kdist check` is asked first (``kdist.kube.probe.restarts``:
    a dry-run create of a tiny pod, else a Job). auto renders in place where the rule is
    served and recreate where it is dropped or refused; where the probe cannot tell (403
    on both, a 5xx), recreate, the form every cluster accepts, and a note says so.
    inPlace where not served is refused before anything is made.

    Gang: auto sends a native gang where discovery shows PodGroups (none elsewhere). The
    PodGroup is asked by a dry-run create: refused (a Role without podgroups, 403; or 404
    though discovery lists them), the job is sent without one and a note says so. native
    where PodGroups are not served, or refused, is refused before anything is made. An
    auto gang whose training object (the first: nothing made) is refused for its pods'
    schedulingGroup is sent once more without it (the one second create).
    """
    from kdist.backends import get as backend_of
    from kdist.kube.write.creating import refusal
    from kdist.rendering import gang as G
    from kdist.rendering import render
    d = job.spec.distributed
    b = backend_of(job.spec.backend)
    if b.installs and not cluster.serves(b.kind):  # before any probe: nothing written
        raise OperatorMissing(f"{b.installs} is not installed (no {b.kind.api_version} "
                              f"{b.kind.kind} resource): job {job.metadata.name} not submitted")
    if job.spec.trainjob.runtime_ref:  # before any probe too: nothing written
        from kdist.kube.probe.runtimeref import check_runtime
        check_runtime(cluster, job.spec.trainjob.runtime_ref)
    notes: list[str] = []
    mode = _restart_mode(cluster, job, notes)
    asked = G.can_gang(job) or d.gang == G.NATIVE
    served = kinds.podgroup(cluster.serves) if asked else None  # v1, else v1beta1
    gang = G.resolve(job, served=G.can_gang(job) and served is not None)
    if d.gang == G.NATIVE and served is None:
        raise UsageError("spec.distributed.gang native: the cluster does not serve PodGroups "
                         f"({kinds.PODGROUP_V1.api_version} or {kinds.PODGROUP.api_version}; "
                         "feature gate GenericWorkload off, or Kubernetes < 1.37); use auto "
                         "(none where not served) or none")
    api = served.api_version if served is not None else G.API_VERSION
    refused = refusal(cluster, G.podgroup(job, api)) if gang == G.NATIVE else None
    if refused and d.gang == G.NATIVE:
        raise ClusterError(f"spec.distributed.gang native: the PodGroup is refused: {refused}")
    if refused:
        gang = G.NONE
        notes.append(f"PodGroup {G.podgroup_name(job)} is refused ({refused}): job "
                     f"{job.metadata.name} is scheduled pod by pod, not as a gang "
                     "(distributed.gang auto)")
    objects = render(job, code, mode, gang, api)
    try:
        return (*cluster.create(objects, dry_run=dry_run), notes)
    except ClusterError as e:
        if not (gang == G.NATIVE and d.gang == "auto" and G.refused(e)):
            raise
    # The Job was refused for its schedulingGroup: nothing was made (it is the first object).
    return (*cluster.create(render(job, code, mode, G.NONE), dry_run=dry_run), notes)


def _restart_mode(cluster: Cluster, job: TrainingJob, notes: list[str]) -> str:
    """How `job` restarts on `cluster`, from the restart-rules probe where the spec leaves
    it open; a note where the probe could not tell (auto then recreates)."""
    from kdist.kube.probe.restarts import restart_rules
    from kdist.kube.probe.verdict import ABSENT, OK
    from kdist.rendering import restarts as R

    asked = job.spec.distributed.restart_mode
    if asked == R.RECREATE or not R.can_restart_in_place(job):
        return R.resolve(job)
    verdict = restart_rules(cluster.ask, job.metadata.namespace or "default")
    if verdict.status == OK:
        return R.IN_PLACE
    if asked == R.IN_PLACE:
        error = UsageError if verdict.status == ABSENT else ClusterError
        raise error(f"spec.distributed.restartMode inPlace: {verdict.detail}; use auto "
                    "(recreate where in place is not served) or recreate")
    if verdict.status != ABSENT:
        notes.append(f"restart rules: {verdict.detail}; job {job.metadata.name} restarts by "
                     "recreating its pods (distributed.restartMode auto)")
    return R.RECREATE


def follow(cluster: Cluster, job: dict[str, Any], observer: Observer, *, logs: bool = True,
           tail: int | None = None, ranks: set[int] | None = None,
           timeout: float | None = None, drain: float = 5.0,
           all_nodes: bool = False) -> JobState:
    """Watch `job` (its API object) to its end, reporting to `observer`; TimedOut on timeout.

    With `logs`, the logs of `ranks` (node indices) are followed; None: nodes 0 to
    LOG_NODES - 1, or every node with `all_nodes` (one connection and thread each)."""
    from kdist.api.ledgerkeeper import LedgerKeeper
    from kdist.kube.watch.reflector import Session
    from kdist.kube.watch.sources import job_sources
    from kdist.kube.watch.tracker import Tracker

    meta = job["metadata"]
    tracker = Tracker(meta["name"], meta["namespace"])
    first = tracker.job_event("ADDED", job)  # its notes: said once, here (kube.watch.tracker)
    if logs and ranks is None and not all_nodes:
        ranks = set(range(LOG_NODES))
        if (tracker.state.nodes or 0) > LOG_NODES:
            first.append(f"logs: following nodes 0-{LOG_NODES - 1} of "
                         f"{tracker.state.nodes} (--all-nodes: every one)")
    sources = job_sources(cluster, job)
    session = Session(tracker, sources, logs=logs, tail=tail, ranks=ranks)
    deadline = time.monotonic() + timeout if timeout else None
    state = tracker.state
    keeper = LedgerKeeper(cluster, job, observer) if logs else None
    observer.start(state)
    for text in first:
        observer.warning(text)
    try:
        session.start()
        for kind, payload in session.events(drain=drain):
            if kind == "warning":
                observer.warning(payload)
            elif kind == "log":
                observer.log(*payload)
            elif kind == "update":
                observer.update(state)
            elif kind == "tick":
                observer.tick(state)
            if keeper is not None:
                keeper.keep(tracker)
            if deadline is not None and state.outcome is None and time.monotonic() > deadline:
                raise TimedOut(timeout_line(state, timeout or 0))
        if keeper is not None and state.outcome is not None:
            keeper.keep(tracker, final=True)  # the totals as the job ended
    finally:
        session.close()
        observer.stop()
    return state


def timeout_line(state: JobState, timeout: float) -> str:
    waiting = [f"{state.unit} {r.rank} {r.phase}" + (f" ({r.reason})" if r.reason else "")
               for r in sorted(state.ranks.values(), key=lambda r: r.rank)
               if r.phase != "Succeeded"]
    return escape(f"timed out after {timeout:g}s: job {state.name} has not finished"
                  + (f" ({', '.join(waiting)})" if waiting else "")
                  + f"; {reattach_hint(state.name, state.namespace)}")


def _check(state: JobState) -> None:
    if state.outcome != "Succeeded":
        raise JobFailed(state.failure_line())


def wait(conn: Connection, name: str, *, timeout: float | None = None, logs: bool = False,
         tail: int | None = None, rank: int | None = None, check: bool = True,
         observer: Observer | None = None, all_nodes: bool = False) -> JobState:
    """Follow job `name` to its end. `check`: raise JobFailed when it failed. `logs`
    follows `rank`'s log, else nodes 0 to LOG_NODES - 1 (`all_nodes`: every one)."""
    cluster, ns = conn.cluster(), conn.namespace()
    job = cluster.get_job(name, ns)
    _check_rank(job, rank)
    state = follow(cluster, job, observer or Quiet(), logs=logs, tail=tail,
                   ranks=None if rank is None else {rank}, timeout=timeout,
                   drain=15.0 if logs else 5.0, all_nodes=all_nodes)
    if check:
        _check(state)
    return state


def _check_rank(job: dict[str, Any], rank: int | None) -> None:
    from kdist.kube.watch.objects import job_nodes

    nodes = job_nodes(job)
    if rank is not None and nodes is not None and not 0 <= rank < nodes:
        raise UsageError(f"node {rank}: job {job['metadata']['name']} has nodes 0 to "
                         f"{nodes - 1}")


def tracked(cluster: Cluster, job: dict[str, Any]) -> Any:
    """A Tracker that has seen `job` and its pods as they are now: read a page at a time
    (`POD_PAGE` pods), each fed and let go before the next is read."""
    from kdist.kube.errors import Gone
    from kdist.kube.watch.objects import pod_selector
    from kdist.kube.watch.tracker import Tracker
    from kdist.shared.limits import POD_PAGE

    meta = job["metadata"]

    def fed(pages: Iterator[list[dict[str, Any]]]) -> Any:
        tracker = Tracker(meta["name"], meta["namespace"])
        tracker.job_event("ADDED", job)
        for page in pages:  # a fresh tracker: each pod once, as a relist would feed it
            for pod in page:
                tracker.pod_event("MODIFIED", pod)
        return tracker

    ns, selector = meta["namespace"], pod_selector(job)
    try:
        return fed(cluster.list_pages(kinds.POD, ns, POD_PAGE, label_selector=selector))
    except Gone:  # the pages' snapshot expired before the last was read: all in one
        return fed(iter([cluster.list_pods(ns, selector)]))


def status(conn: Connection, name: str, *, tail: int = 2000) -> JobState:
    """Job `name` now: its phase, and per rank its pod, restarts and recent step/loss."""
    from kdist.api.statuslogs import read_step_logs
    from kdist.shared.errors import KdistError

    cluster, ns = conn.cluster(), conn.namespace()
    job = cluster.get_job(name, ns)
    tracker = tracked(cluster, job)
    for workload in cluster.workloads_of(job)[-1:]:
        tracker.queue_event(workload)
    try:
        for podgroup in cluster.podgroups_of(job):
            tracker.gang_event(podgroup)
    except KdistError as e:  # not this user's to read (403): the rest of the job still is
        tracker.state.gang_status, tracker.state.gang_message = "unreadable", str(e)
    read_step_logs(cluster, tracker, ns, tail)  # a bounded number of logs, a few at once
    return tracker.state


def no_log_note(state: JobState, r: Any) -> str:
    """Why rank `r` has no log to read (yet)."""
    what = f"pod {r.pod} is {r.phase}" if r.pod else (
        "its pod is gone" if state.outcome else "no pod yet")
    hint = "" if state.outcome else " yet; -f waits for it"
    return escape(f"{what}{f', {r.reason}' if r.reason else ''}: no log{hint}")


def list_jobs(conn: Connection, *, all_namespaces: bool = False,
              selector: str = "") -> list[JobSummary]:
    """kdist's jobs of every backend in the namespace (or in all); with a label
    `selector`, only those it matches."""
    from kdist.kube.watch.objects import job_kind_backend, job_nodes, job_phase, parse_time
    from kdist.shared.labels import BACKEND

    cluster, ns = conn.cluster(), conn.namespace()
    now, rows = time.time(), []
    for obj in cluster.list_jobs(None if all_namespaces else ns, selector):
        meta = obj["metadata"]
        created = parse_time(meta.get("creationTimestamp"))
        rows.append(JobSummary(
            name=meta["name"], namespace=meta.get("namespace", ""),
            # A label's value, shown as the cluster has it but never obeyed (the name and
            # namespace stay as they are: they name the job in requests).
            backend=escape((meta.get("labels") or {}).get(BACKEND) or job_kind_backend(obj)[1]),
            nodes=job_nodes(obj), phase=job_phase(obj),
            age_s=None if created is None else now - created,
            kind=job_kind_backend(obj)[0], created=meta.get("creationTimestamp")))
    return rows


def delete(conn: Connection, name: str, *, wait: bool = True, timeout: float = 300) -> Deleted:
    """Delete job `name` (foreground: pods, Service, the job); with `wait`, until all is gone."""
    cluster, ns = conn.cluster(), conn.namespace()
    deleted = cluster.delete(name, ns)
    if wait:
        from kdist.kube.watch.sources import wait_gone

        wait_gone(cluster, name, ns, timeout)
    return Deleted(ns, deleted)


def undo(cluster: Cluster, sub: Submission) -> None:
    """Delete again the job `sub` created (a batch that failed later), and only that one.

    By the name and namespace kdist sent, with the uid the server gave it as a
    precondition: a job of that name made meanwhile by anyone else stays (a
    ClusterError says so). Its Service and ConfigMaps are owned by it and go with
    it. JobNotFound when it is gone already.
    """
    from kdist.kube import kinds
    from kdist.shared.errors import ClusterError

    job = sub.objects[0]
    uid = (job.get("metadata") or {}).get("uid")
    if not uid:  # kube.client.create refuses an answer without one: never here
        raise ClusterError(f"job {sub.name} has no uid: kdist did not create it")
    cluster.delete_object(kinds.of(job), sub.name, sub.namespace, uid=uid)
