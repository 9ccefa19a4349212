"""The cluster verbs: submit, status, logs, list, delete — a thin shell over `kdist.api`.

They parse flags, call the API, and print through `kdist.cli.progress`. The
`kubernetes` client and `rich` are imported inside the commands, so
`kdist --help`, `render` and `validate` stay fast. Names are checked before
any request (`kdist.api.check_name`). Ctrl-C (or SIGTERM) while watching
leaves the job running and exits 130 with a hint to reattach.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from kdist.cli.options import ClusterOptions, Seconds, backend_option, job_file_argument
from kdist.shared.errors import JobFailed, UsageError


def _opts(opts: ClusterOptions) -> dict[str, Any]:
    return {"kubeconfig": opts.kubeconfig, "context": opts.context,
            "namespace": opts.namespace, "request_timeout": opts.request_timeout}


@contextmanager
def _watching(name: str, namespace: str | list[str]) -> Iterator[None]:
    """Ctrl-C (or SIGTERM) ends the watch, not the job: say how to reattach, exit 130.

    `namespace` may be a one-item list filled in later (known once submitted).
    """
    from kdist import api
    from kdist.shared.signals import interruptible

    with interruptible():
        try:
            yield
        except KeyboardInterrupt:
            ns = namespace[0] if isinstance(namespace, list) else namespace
            click.echo(f"\ninterrupted: {api.reattach_hint(name, ns)}", err=True)
            sys.exit(130)


def _name(name: str) -> str:
    from kdist import api

    return api.check_name(name)


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
@click.option("--timeout", type=Seconds(), metavar="SECONDS",
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
    from kdist import api
    from kdist.cli.main import load
    from kdist.rendering import to_yaml

    if follow and not wait:
        raise UsageError("--follow needs --wait")
    job = load(file, opts.namespace, backend)
    started = time.monotonic()
    where = [opts.namespace or job.metadata.namespace or "default"]

    def said(sub: api.Submission) -> None:
        if sub.replaced:
            click.echo(f"replaced: deleted {', '.join(sub.replaced)}")
        for w in sub.warnings:
            click.echo(f"warning: the API server says: {w}", err=True)
        for obj in sub.objects:
            suffix = " (server dry run: accepted, nothing persisted)" if dry_run else ""
            click.echo(f"{_ref(obj)} created in namespace {sub.namespace}{suffix}")
        if not wait and not dry_run:
            click.echo(f"follow it with `kdist -n {sub.namespace} status {sub.name}` or "
                       f"`kdist -n {sub.namespace} logs -f {sub.name}`")
        nonlocal started
        started, where[0] = time.monotonic(), sub.namespace

    display = None
    if wait and dry_run is None:
        from kdist.cli.progress import make_display

        display = make_display(echo_logs=follow)
    with _watching(job.metadata.name, where):
        sub = api.submit(job, wait=wait, replace=replace, dry_run=dry_run, logs=True,
                         timeout=timeout, observer=display, on_submitted=said, **_opts(opts))
    if dry_run == "client":
        click.echo(to_yaml(sub.objects), nl=False)
        return
    if sub.state is not None:
        _finish(sub.state, started)


def _finish(state: Any, started: float) -> None:
    """Exit 0 with one line if the job succeeded, else raise JobFailed (exit 1)."""
    from kdist.cli.progress import duration

    if state.outcome == "Succeeded":
        click.echo(f"job {state.name} succeeded in {duration(time.monotonic() - started)}")
        return
    raise JobFailed(state.failure_line())


def _ref(obj: dict[str, Any]) -> str:
    api_version = obj.get("apiVersion", "")
    group = api_version.partition("/")[0] if "/" in api_version else ""
    kind = obj.get("kind", "").lower()
    name = obj["metadata"]["name"]
    return f"{kind}.{group}/{name}" if group else f"{kind}/{name}"


# ---- status, logs ------------------------------------------------------------------------------


@click.command()
@click.argument("name")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="Output format.")
@click.pass_obj
def status(opts: ClusterOptions, name: str, output: str) -> None:
    """Show job NAME: its phase, and per rank pod, phase, restarts, step, loss history."""
    from kdist import api

    state = api.status(_name(name), **_opts(opts))
    if output == "json":
        click.echo(json.dumps(state.to_dict(), indent=2))
        return
    from kdist.cli.progress import print_status

    print_status(state)


@click.command()
@click.argument("name")
@click.option("--rank", type=click.IntRange(min=0, max=100_000), help="Only this node rank.")
@click.option("-f", "--follow", is_flag=True,
              help="Wait through Pending, follow every rank across restarts, end with the job "
                   "(exit 1 if it failed).")
@click.option("--tail", type=click.IntRange(min=0, max=10_000_000),
              help="Start from the last N lines of each log.")
@click.pass_obj
def logs(opts: ClusterOptions, name: str, rank: int | None, follow: bool,
         tail: int | None) -> None:
    """Print the logs of job NAME, every rank's lines prefixed with `[rank N] `."""
    from kdist import api

    _name(name)
    if follow:
        from kdist.cli.progress import LogDisplay

        with _watching(name, api.namespace(**_opts(opts))):
            api.wait(name, logs=True, tail=tail, rank=rank, observer=LogDisplay(),
                     **_opts(opts))
        return
    for entry in api.logs(name, rank=rank, tail=tail, **_opts(opts)):
        if entry.note:
            click.echo(f"[rank {entry.rank}] ({entry.note})", err=True)
        for line in entry.lines:
            click.echo(f"[rank {entry.rank}] {line}")


# ---- list, delete ------------------------------------------------------------------------------


@click.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="Jobs in every namespace.")
@click.pass_obj
def list_(opts: ClusterOptions, all_namespaces: bool) -> None:
    """List kdist jobs of both backends (Indexed Jobs and PyTorchJobs)."""
    from kdist import api
    from kdist.cli.progress import print_jobs

    print_jobs(api.list_jobs(all_namespaces=all_namespaces, **_opts(opts)), all_namespaces)


@click.command()
@click.argument("name")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until every object of the job (pods included) is gone.")
@click.option("--timeout", type=Seconds(), default=300, show_default=True, metavar="SECONDS",
              help="How long --wait waits.")
@click.pass_obj
def delete(opts: ClusterOptions, name: str, wait: bool, timeout: float) -> None:
    """Delete job NAME with foreground propagation: its pods, Service and the job itself."""
    from kdist import api

    gone = api.delete(_name(name), wait=wait, timeout=timeout, **_opts(opts))
    click.echo(f"deleted {', '.join(gone.objects)} in namespace {gone.namespace}"
               + (" (every object is gone)" if wait else ""))


COMMANDS = [submit, status, logs, list_, delete]
