"""The cluster verbs: submit, status, logs, list, delete.

Thin on purpose: parse, call kdist.cluster / kdist.watch, print through
kdist.progress. The `kubernetes` client and `rich` are imported inside the
commands, so `kdist --help`, `render` and `validate` stay fast.

Exit codes (DESIGN.md): 0 the job succeeded, 1 it failed (or did not finish
within --timeout), 2 bad input, 3 cluster or API error; 130 on Ctrl-C, which
leaves the job running.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from kdist.errors import JobFailed, UsageError
from kdist.options import ClusterOptions, backend_option, job_file_argument

if TYPE_CHECKING:
    from kdist.cluster import Cluster
    from kdist.progress import PlainDisplay
    from kdist.watch import JobState


class TimedOut(JobFailed):
    """--timeout passed before the job finished (it keeps running)."""


def _reattach_hint(name: str, namespace: str) -> str:
    return (f"job {name} keeps running in namespace {namespace}; reattach with "
            f"`kdist -n {namespace} status {name}` or `kdist -n {namespace} logs -f {name}`, "
            f"stop it with `kdist -n {namespace} delete {name}`")


def _connect(opts: ClusterOptions) -> tuple[Cluster, str]:
    from kdist.cluster import Cluster, resolve_namespace

    return Cluster.connect(opts), resolve_namespace(opts)


def _follow(cluster: Cluster, job: dict[str, Any], display: PlainDisplay, *, logs: bool = True,
            tail: int | None = None, ranks: set[int] | None = None,
            timeout: float | None = None, drain: float = 5.0) -> JobState:
    """Watch `job` to its end through `display`; Ctrl-C (or SIGTERM) leaves it running."""
    from kdist.signals import interruptible
    from kdist.watch import Session, Tracker

    meta = job["metadata"]
    tracker = Tracker(meta["name"], meta["namespace"])
    tracker.job_event("ADDED", job)
    session = Session(tracker, cluster.sources(job), logs=logs, tail=tail, ranks=ranks)
    deadline = time.monotonic() + timeout if timeout else None
    state = tracker.state
    display.start(state)
    with interruptible():
        try:
            session.start()
            for kind, payload in session.events(drain=drain):
                if kind == "warning":
                    display.warning(payload)
                elif kind == "log":
                    display.log(*payload)
                elif kind == "update":
                    display.update(state)
                elif kind == "tick":
                    display.tick(state)
                if deadline is not None and state.outcome is None and time.monotonic() > deadline:
                    raise TimedOut(_timeout_line(state, timeout or 0))
        except KeyboardInterrupt:
            display.stop()
            hint = _reattach_hint(meta["name"], meta["namespace"])
            click.echo(f"\ninterrupted: {hint}", err=True)
            sys.exit(130)
        finally:
            session.close()
            display.stop()
    return state


def _timeout_line(state: JobState, timeout: float) -> str:
    waiting = [f"rank {r.rank} {r.phase}" + (f" ({r.reason})" if r.reason else "")
               for r in sorted(state.ranks.values(), key=lambda r: r.rank)
               if r.phase != "Succeeded"]
    return (f"timed out after {timeout:g}s: job {state.name} has not finished"
            + (f" ({', '.join(waiting)})" if waiting else "")
            + f"; {_reattach_hint(state.name, state.namespace)}")


def _finish(state: JobState, started: float) -> None:
    """Exit 0 with one line if the job succeeded, else raise JobFailed (exit 1)."""
    from kdist.progress import duration

    if state.outcome == "Succeeded":
        click.echo(f"job {state.name} succeeded in {duration(time.monotonic() - started)}")
        return
    raise JobFailed(state.failure_line())


# ---- submit ------------------------------------------------------------------------------------


@click.command()
@job_file_argument
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Watch the job to its end (exit code 0 succeeded, 1 failed).")
@click.option("-f", "--follow", is_flag=True,
              help="While waiting, also print every rank's log lines ([rank N] prefix).")
@click.option("--dry-run", type=click.Choice(["client", "server"]), is_flag=False,
              flag_value="client", default=None,
              help="client: print the objects that would be sent; server: send them with "
                   "dryRun=All and report the API server's verdict.")
@click.option("--replace", is_flag=True,
              help="Delete an existing job of the same name first (and wait until it is gone).")
@backend_option
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Stop waiting after SECONDS (exit 1; the job keeps running).")
@click.pass_obj
def submit(opts: ClusterOptions, file: str, wait: bool, follow: bool, dry_run: str | None,
           replace: bool, backend: str | None, timeout: float | None) -> None:
    """Validate, render and create FILE's job, then watch it to the end.

    The headless Service (indexed-job backend) is created owned by the Job, so
    deleting the Job removes everything. --dry-run=client prints the objects
    as `kdist render` would with the namespace resolved; the Service's
    ownerReference is added at submission, once the Job's uid exists.
    """
    from kdist.cli import load
    from kdist.cluster import JobNotFound, resolve_namespace
    from kdist.rendering import render, to_yaml

    if follow and not wait:
        raise UsageError("--follow needs --wait")
    if replace and dry_run == "server":
        raise UsageError("--replace cannot be combined with --dry-run=server (it would delete)")
    job = load(file, opts.namespace, backend)
    ns = resolve_namespace(opts, job.metadata.namespace, missing_ok=dry_run == "client")
    if job.metadata.namespace != ns:
        job = job.model_copy(update={"metadata": job.metadata.model_copy(
            update={"namespace": ns})})
    objects = render(job)
    if dry_run == "client":
        click.echo(to_yaml(objects), nl=False)
        return
    cluster, _ = _connect(opts)
    name = job.metadata.name
    if replace:
        try:
            gone = cluster.delete(name, ns, wait=True)
            click.echo(f"replaced: deleted {', '.join(gone)}")
        except JobNotFound:
            pass
    started = time.monotonic()
    created, warnings = cluster.create(objects, dry_run=dry_run == "server")
    for w in warnings:
        click.echo(f"warning: the API server says: {w}", err=True)
    for obj in created:
        suffix = " (server dry run: accepted, nothing persisted)" if dry_run else ""
        click.echo(f"{_ref(obj)} created in namespace {ns}{suffix}")
    if dry_run:
        return
    if not wait:
        click.echo(f"follow it with `kdist -n {ns} status {name}` or "
                   f"`kdist -n {ns} logs -f {name}`")
        return
    from kdist.progress import make_display

    state = _follow(cluster, created[0], make_display(echo_logs=follow), timeout=timeout)
    _finish(state, started)


def _ref(obj: dict[str, Any]) -> str:
    group = obj.get("apiVersion", "").partition("/")[0] if "/" in obj.get("apiVersion", "") \
        else ""
    kind = obj.get("kind", "").lower()
    return f"{kind}.{group}/{obj['metadata']['name']}" if group else \
        f"{kind}/{obj['metadata']['name']}"


# ---- status, logs ------------------------------------------------------------------------------


def _snapshot(cluster: Cluster, job: dict[str, Any], tail: int = 2000) -> JobState:
    """The job's state now: its object, its pods, and its ranks' recent JSON log lines."""
    from kdist.cluster import pod_selector
    from kdist.errors import KdistError
    from kdist.watch import Tracker

    meta = job["metadata"]
    tracker = Tracker(meta["name"], meta["namespace"])
    tracker.job_event("ADDED", job)
    tracker.pod_relist(cluster.list_pods(meta["namespace"], pod_selector(job)))
    for r in tracker.state.ranks.values():
        if r.pod and tracker.pod_started(r.pod):
            try:
                lines = cluster.read_log(r.pod, meta["namespace"], tail=tail)
            except KdistError:
                continue  # a log that cannot be read leaves step/loss unknown
            for line in lines:
                tracker.log_line(r.pod, line)
    return tracker.state


@click.command()
@click.argument("name")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
@click.pass_obj
def status(opts: ClusterOptions, name: str, output: str) -> None:
    """Show job NAME: its phase, and per rank pod, phase, restarts, step, loss history."""
    cluster, ns = _connect(opts)
    state = _snapshot(cluster, cluster.get_job(name, ns))
    if output == "json":
        click.echo(json.dumps(state.to_dict(), indent=2))
        return
    from kdist.progress import print_status

    print_status(state)


@click.command()
@click.argument("name")
@click.option("--rank", type=click.IntRange(min=0), help="Only this node rank.")
@click.option("-f", "--follow", is_flag=True,
              help="Wait through Pending, follow every rank across restarts, end with the job "
                   "(exit 1 if it failed).")
@click.option("--tail", type=click.IntRange(min=0), help="Start from the last N lines of each log.")
@click.pass_obj
def logs(opts: ClusterOptions, name: str, rank: int | None, follow: bool,
         tail: int | None) -> None:
    """Print the logs of job NAME, every rank's lines prefixed with `[rank N] `."""
    cluster, ns = _connect(opts)
    job = cluster.get_job(name, ns)
    from kdist.watch import job_nodes

    nodes = job_nodes(job)
    if rank is not None and nodes is not None and rank >= nodes:
        raise UsageError(f"--rank {rank}: job {name} has ranks 0 to {nodes - 1}")
    if follow:
        from kdist.progress import LogDisplay

        state = _follow(cluster, job, LogDisplay(), tail=tail,
                        ranks=None if rank is None else {rank}, drain=15.0)
        if state.outcome != "Succeeded":
            raise JobFailed(state.failure_line())
        return
    _print_logs(cluster, job, rank, tail)


def _print_logs(cluster: Cluster, job: dict[str, Any], rank: int | None,
                tail: int | None) -> None:
    from kdist.cluster import pod_selector
    from kdist.watch import Tracker

    ns = job["metadata"]["namespace"]
    tracker = Tracker(job["metadata"]["name"], ns)
    tracker.job_event("ADDED", job)
    tracker.pod_relist(cluster.list_pods(ns, pod_selector(job)))
    for r in sorted(tracker.state.ranks.values(), key=lambda r: r.rank):
        if rank is not None and r.rank != rank:
            continue
        if not r.pod or not tracker.pod_started(r.pod):
            state = tracker.state
            what = f"pod {r.pod} is {r.phase}" if r.pod else (
                "its pod is gone" if state.outcome else "no pod yet")
            hint = "" if state.outcome else " yet; -f waits for it"
            click.echo(f"[rank {r.rank}] ({what}{f', {r.reason}' if r.reason else ''}: no log"
                       f"{hint})", err=True)
            continue
        for line in cluster.read_log(r.pod, ns, tail=tail):
            click.echo(f"[rank {r.rank}] {line}")


# ---- list, delete ------------------------------------------------------------------------------


@click.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="Jobs in every namespace.")
@click.pass_obj
def list_(opts: ClusterOptions, all_namespaces: bool) -> None:
    """List kdist jobs of both backends (Indexed Jobs and PyTorchJobs)."""
    from kdist import labels as L
    from kdist.progress import print_jobs
    from kdist.watch import job_kind_backend, job_nodes, job_phase, parse_time

    cluster, ns = _connect(opts)
    rows = []
    now = time.time()
    for obj in cluster.list_jobs(None if all_namespaces else ns):
        meta = obj["metadata"]
        created = parse_time(meta.get("creationTimestamp"))
        rows.append({
            "name": meta["name"], "namespace": meta.get("namespace", ""),
            "backend": (meta.get("labels") or {}).get(L.BACKEND) or job_kind_backend(obj)[1],
            "nodes": job_nodes(obj), "phase": job_phase(obj),
            "age": None if created is None else now - created,
        })
    print_jobs(rows, all_namespaces)


@click.command()
@click.argument("name")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until every object of the job (pods included) is gone.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=300,
              show_default=True, metavar="SECONDS", help="How long --wait waits.")
@click.pass_obj
def delete(opts: ClusterOptions, name: str, wait: bool, timeout: float) -> None:
    """Delete job NAME with foreground propagation: its pods, Service and the job itself."""
    cluster, ns = _connect(opts)
    deleted = cluster.delete(name, ns, wait=wait, timeout=timeout)
    click.echo(f"deleted {', '.join(deleted)} in namespace {ns}"
               + (" (every object is gone)" if wait else ""))


COMMANDS = [submit, status, logs, list_, delete]
