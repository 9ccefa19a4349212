"""What `kdist submit` did, so that every way it ends says what exists afterwards.

One job, or a batch of several: namespaces are resolved before anything else
(-n, metadata.namespace, the context's, "default"), so the same job in two
files is one job, refused before any request. A batch is all or nothing:
every file is validated and packed first, then the jobs are created in order,
and if one fails (or Ctrl-C / SIGTERM comes) the jobs this batch created are
deleted again, whatever more signals arrive meanwhile. What --replace deleted
first cannot be brought back; the message says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from kdist.cli.say import say
from kdist.shared.errors import KdistError, UsageError
from kdist.shared.terminal import escape

if TYPE_CHECKING:
    from kdist.api import Submission
    from kdist.api.batchkit import ClusterOptions, TrainingJob

#: How long --replace waits for the old job's objects to be gone.
DELETE_TIMEOUT = 300.0


def resolved(opts: ClusterOptions, loaded: list[tuple[str, TrainingJob]],
             dry_run: str | None) -> list[tuple[str, TrainingJob]]:
    """Each job with the namespace it will be created in; UsageError when two files are
    the same job (a batch would create it, then --replace would delete it again)."""
    from kdist.api.batchkit import KubeConfig, resolve_namespace

    kubeconfig = KubeConfig.load(opts, missing_ok=dry_run == "client")
    seen: dict[tuple[str, str], str] = {}
    out = []
    for file, job in loaded:
        ns = resolve_namespace(opts, job.metadata.namespace, kubeconfig)
        key = (ns, job.metadata.name)
        if key in seen:
            raise UsageError(f"{file}: job {key[1]} in namespace {ns} is also in {seen[key]}; "
                             "a batch creates each job once")
        seen[key] = file
        if job.metadata.namespace != ns:
            meta = job.metadata.model_copy(update={"namespace": ns})
            job = job.model_copy(update={"metadata": meta})
        out.append((file, job))
    return out


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


@dataclass
class Ledger:
    """What this command has done so far, in the cluster."""

    options: dict[str, Any]
    replaced: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    created: list[tuple[str, Submission]] = field(default_factory=list)
    submitted: bool = False  # the job (of a one-job submit) exists

    def target(self, namespace: str) -> dict[str, Any]:
        return dict(self.options, namespace=namespace)

    def replace(self, job: TrainingJob) -> None:
        """Delete the job of this name (--replace) and wait until it is gone; say what went.

        As `kdist.api.submit(replace=True)` does, with the deletes held against signals
        (what a delete half-sent removed would be unknown) and what went remembered.
        """
        from kdist.api.batchkit import wait_gone
        from kdist.api.types import connect, target
        from kdist.shared.errors import JobNotFound
        from kdist.shared.signals import held

        name, ns = job.metadata.name, job.metadata.namespace or "default"
        if any((s.namespace, s.name) == (ns, name) for _, s in self.created):
            raise UsageError(f"job {name} in namespace {ns} was created by this batch: "
                             "--replace will not delete it")
        cluster, _ = connect(target(**self.target(ns)))
        cluster.training_kinds()  # discovery, a read: outside the hold, Ctrl-C ends it at once
        with held():
            try:
                self.replaced[(ns, name)] = cluster.delete(name, ns)
            except JobNotFound:
                pass  # nothing to replace
        if (ns, name) in self.replaced:
            say(f"replaced: deleted {', '.join(self.replaced[(ns, name)])}")
            wait_gone(cluster, name, ns, DELETE_TIMEOUT)

    def undo(self, e: BaseException, file: str, job: TrainingJob, dry_run: str | None) -> None:
        """Delete again every job this batch created, then end the command with one line
        saying why and what exists: exit 130 after Ctrl-C / SIGTERM, else the error's code.
        Further signals wait until every delete has been sent."""
        import sys

        from kdist.api.batchkit import undo
        from kdist.api.types import connect, target
        from kdist.shared.errors import JobNotFound
        from kdist.shared.signals import held

        undone, left = [], []
        try:
            with held():
                for made_from, sub in reversed(self.created if dry_run is None else []):
                    try:
                        # By the uid it was created with: not whatever has its name now.
                        undo(connect(target(**self.target(sub.namespace)))[0], sub)
                        undone.append(f"job {sub.name} ({made_from})")
                    except JobNotFound:
                        undone.append(f"job {sub.name} ({made_from}, gone already)")
                    except KdistError as err:
                        left.append(f"job {sub.name} in namespace {sub.namespace} "
                                    f"({made_from}: {one_line(err)})")
        except KeyboardInterrupt:
            pass  # every delete was sent: what follows says what is left
        name, ns = job.metadata.name, job.metadata.namespace or "default"
        interrupted = isinstance(e, KeyboardInterrupt)
        story = [f"{file}: " + (_not_created(name, ns, e) if interrupted else one_line(e))]
        if dry_run == "server":
            story.append("server dry run: nothing was persisted")
        elif not self.created:
            story.append("no job of this batch had been created")
        else:
            if undone:
                story.append(f"the batch is undone: deleted {', '.join(reversed(undone))}")
            if left:
                story.append(f"could not delete {', '.join(left)}: `kdist delete` them")
        story.append(self.replaced_words())
        if not left and not getattr(e, "left", None) and dry_run is None:
            story.append("no job of this batch exists")
        line = "; ".join(filter(None, story))
        if interrupted:
            click.echo(f"\ninterrupted: {escape(line)}", err=True)
            sys.exit(130)
        failure = KdistError(line)
        failure.exit_code = getattr(e, "exit_code", 3)
        raise failure from None

    # -- what to say -----------------------------------------------------------------------

    def replaced_words(self) -> str:
        said = [", ".join(gone) for gone in self.replaced.values()]
        return f"--replace had deleted {', '.join(said)}: not restored" if said else ""

    def interrupted_one(self, name: str, ns: str, e: BaseException, dry_run: str | None) -> str:
        """The line for a one-job submit that Ctrl-C / SIGTERM ended."""
        from kdist import api

        if self.submitted:
            return ("nothing was persisted (server dry run)" if dry_run
                    else api.reattach_hint(name, ns))
        return "; ".join(filter(None, [_not_created(name, ns, e), self.replaced_words()]))


def _not_created(name: str, ns: str, e: BaseException) -> str:
    """What an interrupt left of job `name` that was not (fully) created."""
    undone, left = getattr(e, "undone", None), getattr(e, "left", [])
    if left:
        return (f"job {name} was being created; could not delete again {', '.join(left)}: "
                f"`kdist -n {ns} delete {name}` removes what is left")
    if undone:
        return f"job {name} was not created: deleted again {', '.join(undone)}"
    return f"job {name} was not created (nothing of it was sent)"



# ---- several files -------------------------------------------------------------------------


def submit_many(opts: ClusterOptions, files: tuple[str, ...], dry_run: str | None,
                replace: bool, backend: str | None) -> list[Submission]:
    """Create the job of every file, all or nothing; returns what was created."""
    from kdist import api
    from kdist.api.batchkit import to_yaml
    from kdist.cli.main import load, pack_code, say_pod_security
    from kdist.shared.signals import interruptible

    jobs = resolved(opts, [(file, load(file, opts.namespace, backend)) for file in files],
                    dry_run)
    codes = [pack_code(job, None) for _, job in jobs]  # all checked before any request
    options = {"kubeconfig": opts.kubeconfig, "context": opts.context,
               "request_timeout": opts.request_timeout}
    ledger = Ledger(options)
    warned: set[str] = set()
    file, job = jobs[0]
    with interruptible():
        try:
            for (file, job), code in zip(jobs, codes, strict=True):
                ns = job.metadata.namespace or "default"
                if replace and dry_run is None:
                    ledger.replace(job)
                sub = api.submit(job, wait=False, dry_run=dry_run, code=code,
                                 **ledger.target(ns))
                say_pod_security(file, sub.objects)
                if dry_run == "client":
                    click.echo(to_yaml(sub.objects), nl=False)
                    continue
                ledger.created.append((file, sub))
                for w in sub.warnings:
                    if w not in warned:  # once per distinct text in the whole batch
                        warned.add(w)
                        say(f"warning: the API server says: {w}", err=True)
                suffix = " (server dry run: accepted, nothing persisted)" if dry_run else ""
                say(f"{ref(sub.objects[0])} created in namespace {sub.namespace}{suffix}")
        except (KdistError, KeyboardInterrupt) as e:
            ledger.undo(e, file, job, dry_run)  # raises: the batch failed
    return [sub for _, sub in ledger.created]


def ref(obj: dict[str, Any]) -> str:
    """An object as kubectl names it: job.batch/x, service/x."""
    api_version = obj.get("apiVersion", "")
    group = api_version.partition("/")[0] if "/" in api_version else ""
    kind = obj.get("kind", "").lower()
    name = obj["metadata"]["name"]
    return f"{kind}.{group}/{name}" if group else f"{kind}/{name}"
