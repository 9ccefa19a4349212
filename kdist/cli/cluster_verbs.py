"""The cluster verbs: submit, status, wait, delete — a thin shell over `kdist.api`.

They parse flags, call the API, and print through `kdist.cli.progress`. The
`kubernetes` client and `rich` are imported inside the commands, so
`kdist --help`, `render` and `validate` stay fast. Names are checked before
any request (`kdist.api.check_name`). Ctrl-C (or SIGTERM) while watching
leaves the job running and exits 130 with a hint to reattach; while creating,
it undoes the submission (`kdist.cli.submitting`) and says what is left.
Every line holding the cluster's names or words goes out through
`kdist.cli.say.say` (escaped); pod log lines through `kdist.shared.terminal.log_for`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from kdist.cli.jobfiles import name_or_file, names_or_files
from kdist.cli.options import (
    ClusterOptions,
    Command,
    Seconds,
    backend_option,
    cluster_options,
    workdir_option,
)
from kdist.cli.say import say
from kdist.shared import strictjson
from kdist.shared.errors import JobFailed, JobNotFound, UsageError
from kdist.shared.labels import RUNTIME_SHA256
from kdist.shared.terminal import escape

#: How `submit` says the gang restarts (spec.distributed.restartMode, as resolved).
RESTART_WORDS = {
    "inPlace": "in place (the kubelet restarts every pod's containers where they are)",
    "recreate": "by recreating the pods",
}


def _opts(opts: ClusterOptions) -> dict[str, Any]:
    return {"kubeconfig": opts.kubeconfig, "context": opts.context,
            "namespace": opts.namespace, "request_timeout": opts.request_timeout}


@contextmanager
def _interrupts(line: Callable[[KeyboardInterrupt], str]) -> Iterator[None]:
    """Ctrl-C (or SIGTERM) ends the command with exit 130 and `line(e)`: what exists."""
    from kdist.shared.signals import interruptible

    with interruptible():
        try:
            yield
        except KeyboardInterrupt as e:
            click.echo(f"\ninterrupted: {escape(line(e))}", err=True)
            sys.exit(130)


def _watching(name: str, namespace: str) -> Any:
    """Ctrl-C (or SIGTERM) ends the watch, not the job: say how to reattach, exit 130."""
    from kdist import api

    return _interrupts(lambda e: api.reattach_hint(name, namespace))


def _name(name: str) -> str:
    from kdist import api

    return api.check_name(name)


def _selector(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """-l as the API server parses it, refused while the flags are read (before any request)."""
    from kdist.shared.selectors import SelectorProblem, check_selector

    try:
        return check_selector(value)
    except SelectorProblem as e:
        raise UsageError(f"-l/--selector: {e}") from None


# ---- submit ------------------------------------------------------------------------------------


@click.command(cls=Command, examples=[
    "kdist submit job.yaml                 # create, then watch to the end",
    "kdist submit job.yaml -n team-a -f    # ... in team-a, with every node's log lines",
    "kdist submit job.yaml --no-wait",
    "kdist submit job.yaml --dry-run=server",
    "kdist submit a.yaml b.yaml            # one batch: all created, or none"])
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Watch the job(s) to the end (exit code 0 all succeeded, 1 any failed).")
@click.option("-f", "--follow", is_flag=True,
              help="While waiting, also print every pod's log lines ([rank N] prefix; [node N] "
                   "when a pod runs several ranks).")
@click.option("--all-nodes", is_flag=True,
              help="Follow every node's log (for its steps, and with -f its lines), not only "
                   "nodes 0-31: a connection each.")
@click.option("--dry-run", type=click.Choice(["client", "server"]), is_flag=False,
              flag_value="client", default=None,
              help="client: print the objects that would be sent; server: send them with "
                   "dryRun=All and report the API server's verdict.")
@click.option("--replace", is_flag=True,
              help="Delete an existing kdist job of the same name first (and wait until it "
                   "is gone); a same-named job kdist did not make is refused.")
@backend_option
@click.option("--timeout", type=Seconds(), metavar="SECONDS",
              help="Stop waiting after SECONDS (exit 1; the job keeps running).")
@workdir_option
@cluster_options
def submit(opts: ClusterOptions, files: tuple[str, ...], wait: bool, follow: bool,
           all_nodes: bool, dry_run: str | None, replace: bool, backend: str | None,
           timeout: float | None, workdir: str | None) -> None:
    """Validate, render and create the job of each FILE ('-': standard input), then watch
    to the end.

    The headless Service (indexed-job backend) is created owned by the Job, so
    deleting the Job removes everything. --dry-run=client prints the objects
    as `kdist render` would with the namespace resolved; the Service's
    ownerReference is added at submission, once the Job's uid exists. A workdir
    (--workdir, spec.workdir) travels in ConfigMaps owned by the job likewise.

    Several FILEs are one batch, all or nothing: every one is validated (the same
    job twice refused) before anything is sent; if one job fails, the ones created
    are deleted again and the error says what exists. --wait then follows them all
    with one watcher. Ctrl-C / SIGTERM while creating deletes what was created.
    """
    if files.count("-") > 1:
        raise UsageError("'-' (standard input) can be read once: give it one time")
    if len(files) > 1:
        _submit_many(opts, files, wait, follow, dry_run, replace, backend, timeout, workdir)
        return
    _submit_one(opts, files[0], wait, follow, dry_run, replace, backend, timeout, workdir,
                all_nodes)


def _submit_one(opts: ClusterOptions, file: str, wait: bool, follow: bool, dry_run: str | None,
                replace: bool, backend: str | None, timeout: float | None,
                workdir: str | None, all_nodes: bool = False) -> None:
    from kdist import api
    from kdist.api import to_yaml
    from kdist.cli.main import load, pack_code
    from kdist.cli.submitting import Ledger, ref, resolved

    if follow and not wait:
        raise UsageError("--follow needs --wait")
    if replace and dry_run == "server":
        raise UsageError("replace cannot be combined with a server dry run (it would delete)")
    [(_, job)] = resolved(opts, [(file, load(file, opts.namespace, backend))], dry_run)
    code = pack_code(job, workdir)  # before any request: a refused workdir creates nothing
    name, ns = job.metadata.name, job.metadata.namespace or "default"
    ledger = Ledger(dict(_opts(opts), namespace=ns))
    started = time.monotonic()

    def said(sub: api.Submission) -> None:
        from kdist.cli.main import say_pod_security

        nonlocal started
        ledger.submitted, started = True, time.monotonic()
        say_pod_security(file, sub.objects)
        for w in sub.warnings:
            say(f"warning: the API server says: {w}", err=True)
        for note in sub.notes:
            say(f"warning: {note}", err=True)
        suffix = " (server dry run: accepted, nothing persisted)" if dry_run else ""
        for obj in sub.objects:
            if obj.get("kind") != "ConfigMap":
                say(f"{ref(obj)} created in namespace {sub.namespace}{suffix}")
        runtime = [o for o in sub.objects if o.get("kind") == "ConfigMap"
                   and RUNTIME_SHA256 in (o["metadata"].get("annotations") or {})]
        if code is not None:
            # One line for the code's ConfigMaps, however many chunks it took.
            names = [o["metadata"]["name"] for o in sub.objects
                     if o.get("kind") == "ConfigMap" and o not in runtime]
            span = names[0] if len(names) == 1 else f"{names[0]}..{names[-1].rsplit('-', 1)[1]}"
            say(f"configmap/{span} created in namespace {sub.namespace}{suffix} (code "
                f"{code.sha256[:12]}: {code.files} files, {len(code.archive):,} bytes packed)")
        for cm in runtime:  # spec.runtime shipped: kdist's launcher travels with the job
            sha = cm["metadata"]["annotations"][RUNTIME_SHA256]
            say(f"configmap/{cm['metadata']['name']} created in namespace {sub.namespace}"
                f"{suffix} (kdist's runtime {sha[:12]}, shipped with the job)")
        if sub.restart_mode:
            say(f"restarts: {RESTART_WORDS.get(sub.restart_mode, sub.restart_mode)}")
        if sub.gang:  # spec.distributed.gang, as resolved
            say(f"scheduling: as a gang (podgroup/{sub.gang}: all pods at once or none)")
        if not wait and not dry_run:
            say(f"follow it with `kdist -n {sub.namespace} status {sub.name}` or "
                f"`kdist -n {sub.namespace} logs -f {sub.name}`")

    display = None
    if wait and dry_run is None:
        from kdist.cli.progress import make_display

        display = make_display(echo_logs=follow)
    with _interrupts(lambda e: ledger.interrupted_one(name, ns, e, dry_run)):
        if replace and dry_run is None:
            ledger.replace(job)
        sub = api.submit(job, wait=wait, dry_run=dry_run, logs=True, timeout=timeout,
                         observer=display, on_submitted=said, code=code, all_nodes=all_nodes,
                         **ledger.target(ns))
    if dry_run == "client":
        from kdist.cli.main import say_pod_security

        say_pod_security(file, sub.objects)
        click.echo(to_yaml(sub.objects), nl=False)
        return
    if sub.state is not None:
        _finish(sub.state, started)


def _submit_many(opts: ClusterOptions, files: tuple[str, ...], wait: bool, follow: bool,
                 dry_run: str | None, replace: bool, backend: str | None,
                 timeout: float | None, workdir: str | None) -> None:
    from kdist import api
    from kdist.cli.submitting import submit_many

    if follow:
        raise UsageError("--follow follows one job; with several, use `kdist logs -f NAME`")
    if workdir is not None:
        raise UsageError("--workdir applies to one job; give each its spec.workdir")
    if replace and dry_run == "server":
        raise UsageError("replace cannot be combined with a server dry run (it would delete)")
    created = submit_many(opts, files, dry_run, replace, backend)
    if not wait or dry_run:
        return
    by_namespace: dict[str, list[str]] = {}
    for sub in created:
        by_namespace.setdefault(sub.namespace, []).append(sub.name)
    failed: list[str] = []
    for ns, names in by_namespace.items():
        def ended(state: Any) -> None:
            say(f"job {state.name} succeeded" if state.outcome == "Succeeded"
                else state.failure_line(), err=state.outcome != "Succeeded")
        with _watching(", ".join(names), ns):
            states = api.wait_many(names, timeout=timeout, check=False, on_end=ended,
                                   **dict(_opts(opts), namespace=ns))
        failed += [s.name for s in states if s.outcome != "Succeeded"]
    if failed:
        raise JobFailed(f"{len(failed)} of {len(files)} job(s) did not succeed: "
                        f"{', '.join(failed)}")


def _finish(state: Any, started: float) -> None:
    """Exit 0 with one line if the job succeeded, else raise JobFailed (exit 1)."""
    from kdist.cli.progress import duration

    if state.outcome == "Succeeded":
        say(f"job {state.name} succeeded in {duration(time.monotonic() - started)}")
        return
    raise JobFailed(state.failure_line())


# ---- status ----------------------------------------------------------------------------------


@click.command(cls=Command, examples=[
    "kdist status demo",
    "kdist status demo -n team-a -o json",
    "kdist status demo --plot steps.png",
    "kdist status -f job.yaml -o yaml      # the job job.yaml makes"])
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table",
              show_default=True, help="Output format (json and yaml: the same fields).")
@click.option("--plot", "plot", metavar="FILE", type=click.Path(dir_okay=False),
              help="Also draw loss and samples/s per rank over steps, restarts marked, into "
                   "FILE (.png or .svg; needs matplotlib: pip install 'kdist[plot]').")
@cluster_options
@name_or_file()
def status(opts: ClusterOptions, name: str, output: str, plot: str | None = None) -> None:
    """Show job NAME (or -f FILE's): its phase, and per rank pod, phase, restarts, step,
    loss history."""
    from kdist import api

    if plot is not None:
        from kdist.cli.plotting import check, draw

        check(plot)  # before any request: a wrong suffix or no matplotlib sends nothing
    client = api.client(**_opts(opts))  # one connection for the status and the plot
    state = client.status(_name(name))
    if output == "json":
        click.echo(strictjson.dumps(state.to_dict(), indent=2))
        for note in state.notes:  # stdout is the JSON alone
            say(f"note: {note}", err=True)
    elif output == "yaml":
        click.echo(api.to_yaml([state.to_dict()]), nl=False)
        for note in state.notes:
            say(f"note: {note}", err=True)
    else:
        from kdist.cli.progress import print_status

        print_status(state)
    if plot is not None:
        draw(client, name, plot)


# ---- wait, delete (list: kdist.cli.listing) ---------------------------------------------


@click.command("wait", cls=Command, examples=[
    "kdist wait demo other --timeout 3600",
    "kdist wait --all -n team-a",
    "kdist wait -l sweep=lr",
    "kdist wait -f a.yaml -f b.yaml        # the jobs these files make"])
@click.option("--all", "all_jobs", is_flag=True, help="Every kdist job in the namespace.")
@click.option("-l", "--selector", default="", metavar="SELECTOR", callback=_selector,
              help="Every kdist job with these labels (as kubectl's -l); none matching is "
                   "exit 2.")
@click.option("--timeout", type=Seconds(), metavar="SECONDS",
              help="Stop waiting after SECONDS (exit 1; the jobs keep running).")
@cluster_options
@names_or_files
def wait(opts: ClusterOptions, names: tuple[str, ...], all_jobs: bool, selector: str,
         timeout: float | None) -> None:
    """Wait for jobs to end: exit 0 when all succeeded, 1 when any failed or time ran out.

    One watcher follows every job (three watches however many jobs); a line is
    printed as each job ends. A NAME that is not there, or an -l that matches no
    job, is exit 2 (a typo is not "all done"); --all with no jobs is exit 0.
    """
    from kdist import api

    if bool(names) + all_jobs + bool(selector) != 1:
        raise UsageError("give job NAMEs (or -f FILEs), or --all, or -l SELECTOR (one of them)")
    for name in names:
        _name(name)

    def ended(state: Any) -> None:
        if state.outcome == "Succeeded":
            say(f"job {state.name} succeeded")
        else:
            say(state.failure_line(), err=True)

    ns = api.namespace(**_opts(opts))
    with _watching(", ".join(names) or "the jobs", ns):
        states = api.wait_many(list(names), all_jobs=all_jobs, selector=selector,
                               timeout=timeout, on_end=ended, **_opts(opts))
    if not states and selector:
        # Like a NAME that is not there: a typo in -l must not pass as "all done".
        raise JobNotFound(f"no kdist job in namespace {ns} matches -l {selector!r}")
    if not states:
        click.echo("no kdist jobs to wait for")


@click.command(cls=Command, examples=[
    "kdist delete demo",
    "kdist delete demo -n team-a --no-wait",
    "kdist delete -f job.yaml              # the job job.yaml made (its name and namespace)"])
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="Wait until every object of the job (pods included) is gone.")
@click.option("--timeout", type=Seconds(), default=300, show_default=True, metavar="SECONDS",
              help="How long --wait waits.")
@cluster_options
@name_or_file()
def delete(opts: ClusterOptions, name: str, wait: bool, timeout: float) -> None:
    """Delete job NAME (or -f FILE's) with foreground propagation: its pods, Service and
    the job itself.

    Only kdist's objects (labelled app.kubernetes.io/managed-by=kdist and
    kdist.dev/job-name=NAME): a same-named job kdist did not make is refused (exit 2)."""
    from kdist import api

    gone = api.delete(_name(name), wait=wait, timeout=timeout, **_opts(opts))
    say(f"deleted {', '.join(gone.objects)} in namespace {gone.namespace}"
        + (" (every object is gone)" if wait else ""))

