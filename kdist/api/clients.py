"""`kdist.Client`: one cluster target, every verb, arguments checked before any request.

    client = kdist.Client(context="prod", namespace="team-a")
    sub = client.submit("job.yaml", wait=False)
    for rank, line in client.logs(sub.name, follow=True, tail=20):
        print(rank, line)
    print(client.metrics(sub.name)[0][-1].loss)
    value = client.train(my_function, nodes=2)     # rank 0's return value

The kubeconfig is read once and one connection pool serves every call, both
made on the first call that needs the cluster (`validate`, `render`,
`run_local` and `train(local=True)` never do). Every keyword is checked
first, with the CLI's words, as `UsageError` (docs/DESIGN.md, "Python API").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from kdist.api import checks, files, jobs, many, ranklogs
from kdist.api.types import (
    BACKEND_DEFAULT,
    BACKEND_NAMES,
    Connection,
    Deleted,
    JobSummary,
    Observer,
    RankLog,
    Submission,
)
from kdist.kube.connect.config import ClusterOptions
from kdist.shared.errors import UsageError

if TYPE_CHECKING:
    from kdist.api.steps import Step
    from kdist.kube.probe.verdict import Verdict
    from kdist.kube.watch.tracker import JobState
    from kdist.rendering.workdir import Packed
    from kdist.spec.model import TrainingJob

PathLike = str | os.PathLike[str]


def never() -> bool:
    """`watch_jobs`'s default `stop`: watch until interrupted (one object, so the shortcut's
    default is the method's)."""
    return False


class Client:
    """A cluster target (kubectl's global flags as keywords) and the verbs that use it."""

    def __init__(self, *, kubeconfig: PathLike | None = None, context: str | None = None,
                 namespace: str | None = None, request_timeout: float | None = None) -> None:
        self._conn = Connection(checks.target(kubeconfig, context, namespace, request_timeout))

    def __repr__(self) -> str:
        o = self.options
        shown = ", ".join(f"{k}={v!r}" for k, v in vars(o).items() if v is not None)
        return f"kdist.Client({shown})"

    @property
    def options(self) -> ClusterOptions:
        return self._conn.options

    @property
    def namespace(self) -> str:
        """The namespace the verbs use: `namespace=`, else the context's, else "default"."""
        return self._conn.namespace()

    def check(self) -> list[Verdict]:
        """What a first submit needs, one verdict each (`kdist check`): the kubeconfig,
        the connection, the credentials, the namespace, kdist's permissions there, and
        which optional backends and features the cluster serves. Never raises for a
        failed check: a verdict's `status` is "fail", and its `fix` says what to do."""
        from kdist.kube.probe.check import check

        return check(self.options)

    # -- job files, no cluster ------------------------------------------------------------

    def load(self, file: PathLike, *, backend: str | None = None) -> TrainingJob:
        """The job of `file`, validated, with this client's namespace (SpecError otherwise)."""
        return files.load_file(checks.path(file, "file"), self.options.namespace,
                               _backend(backend))

    def validate(self, file: PathLike) -> files.Validated:
        """Check a job file whole (spec, workdir, rendered pods); SpecError lists every problem."""
        return files.validate_file(checks.path(file, "file"))

    def render(self, job: TrainingJob | PathLike, *, backend: str | None = None,
               workdir: PathLike | None = None) -> list[dict[str, Any]]:
        """The Kubernetes objects of `job` (a TrainingJob or a job file), as `kdist render`."""
        job, code = self._job_and_code(job, backend, workdir)
        return files.render_objects(job, code)

    def run_local(self, job: TrainingJob | PathLike, *, workdir: PathLike | None = None,
                  stdout: IO[str] | None = None,
                  on_ledger: Callable[[dict[str, Any]], None] | None = None) -> int:
        """Run `job` here as `kdist run --local` (every node a process group); its exit code.
        Its state (`.kdist/<name>`) sits beside a job file, else in the current directory.
        `on_ledger(ledger)` hears, at the end, its goodput ledger when a node restarted (as
        `status(...).ledger` has a job's)."""
        checks.writer(stdout, "stdout")
        checks.callback(on_ledger, "on_ledger")
        job_file = None
        if isinstance(job, (str, os.PathLike)):
            job_file = checks.path(job, "job")
            job = files.load_file(job_file, local=True)
        job, code = self._job_and_code(job, None, workdir)
        return files.run_local(job, code=code, stdout=stdout, job_file=job_file,
                               on_ledger=on_ledger)

    def _job_and_code(self, job: TrainingJob | PathLike, backend: str | None,
                      workdir: PathLike | None,
                      pack: bool = True) -> tuple[TrainingJob, Packed | None]:
        backend = _backend(backend)
        workdir_s = None if workdir is None else checks.path(workdir, "workdir")
        if isinstance(job, (str, os.PathLike)):
            job = files.load_file(checks.path(job, "job"), self.options.namespace, backend)
        else:
            job = checks.job(job)
            if backend is not None:
                from kdist.rendering import with_backend

                job = with_backend(job, backend)
        return job, files.pack_code(job, workdir_s) if pack else None

    # -- one job --------------------------------------------------------------------------

    def submit(self, job: TrainingJob | PathLike, *, wait: bool = True, replace: bool = False,
               dry_run: str | None = None, timeout: float | None = None, logs: bool = False,
               observer: Observer | None = None,
               on_submitted: Callable[[Submission], None] | None = None,
               code: Packed | None = None, backend: str | None = None,
               workdir: PathLike | None = None, all_nodes: bool = False) -> Submission:
        """Render `job` (a TrainingJob or a job file) and create it, all or nothing; with
        `wait`, follow it to its end (JobFailed if it fails, TimedOut after `timeout`).

        `dry_run="client"` renders only; `"server"` has the API server validate
        without persisting. `replace` deletes a kdist job of the same name first (one
        kdist did not make is a UsageError, nothing deleted). `code`
        is a packed workdir; else `workdir`, else spec.workdir is packed here. The
        watch follows the logs of nodes 0-31 (`all_nodes`: every node's).
        """
        checks.flag(wait, "wait")
        checks.flag(all_nodes, "all_nodes")
        checks.flag(replace, "replace")
        checks.flag(logs, "logs")
        checks.choice(dry_run, "dry_run", (None, "client", "server"))
        timeout = checks.seconds(timeout, "timeout")
        checks.callback(on_submitted, "on_submitted")
        checks.observer(observer)
        checks.code(code)
        if code is not None and workdir is not None:
            raise UsageError("code and workdir: give one of them")
        if code is None:
            job, code = self._job_and_code(job, backend, workdir)
        else:
            job, _ = self._job_and_code(job, backend, None, pack=False)
        return jobs.submit(self._conn, job, wait=wait, replace=replace, dry_run=dry_run,
                           timeout=timeout, logs=logs, observer=observer,
                           on_submitted=on_submitted, code=code, all_nodes=all_nodes)

    def wait(self, name: str, *, timeout: float | None = None, logs: bool = False,
             tail: int | None = None, rank: int | None = None, check: bool = True,
             observer: Observer | None = None, all_nodes: bool = False) -> JobState:
        """Follow job `name` to its end. `check`: raise JobFailed when it failed. `logs`
        follows `rank`'s log, else nodes 0-31's (`all_nodes`: every node's)."""
        checks.name(name)
        checks.flag(all_nodes, "all_nodes")
        timeout = checks.seconds(timeout, "timeout")
        checks.flag(logs, "logs")
        checks.flag(check, "check")
        tail = checks.count(tail, "tail")
        rank = checks.count(rank, "rank", 0, checks.MAX_RANK)
        checks.observer(observer)
        return jobs.wait(self._conn, name, timeout=timeout, logs=logs, tail=tail, rank=rank,
                         check=check, observer=observer, all_nodes=all_nodes)

    def status(self, name: str, *, tail: int = 2000) -> JobState:
        """Job `name` now: its phase, and per rank its pod, restarts and recent step/loss."""
        checks.name(name)
        tail = checks.count(tail, "tail", 0, checks.MAX_TAIL) or 0
        return jobs.status(self._conn, name, tail=tail)

    def logs(self, name: str, *, follow: bool = False, tail: int | None = None,
             ranks: int | Sequence[int] | None = None,
             on_note: Callable[[int, str], None] | None = None) -> Iterator[tuple[int, str]]:
        """Every rank's log lines as `(rank, line)`: each rank's log in turn as it is now,
        or, with `follow`, every rank's lines as they arrive, across restarts, until the
        job has ended (the lines are streamed, never held whole).

        `tail`: start from each log's last N lines. `ranks`: only these node ranks.
        `on_note(rank, why)` hears of a rank that has no log to read (yet), or whose log
        the API refused or cut off (not following: the other ranks' lines go on; without
        `on_note`, a ClusterError after the last line names those ranks).
        """
        from kdist.api.stream import stream_logs

        checks.name(name)
        checks.flag(follow, "follow")
        tail = checks.count(tail, "tail")
        chosen = checks.ranks(ranks)
        checks.callback(on_note, "on_note")
        return stream_logs(self._conn, name, follow=follow, tail=tail, ranks=chosen,
                           on_note=on_note)

    def rank_logs(self, name: str, *, rank: int | None = None,
                  tail: int | None = None) -> list[RankLog]:
        """Every rank's log (or one rank's) as it is now, in rank order, as lists (a log
        over 128 MiB is refused: `logs` streams any size). A rank whose log the API
        refused or did not answer has no lines and a `note` saying why."""
        checks.name(name)
        rank = checks.count(rank, "rank", 0, checks.MAX_RANK)
        tail = checks.count(tail, "tail")
        return ranklogs.rank_logs(self._conn, name, rank=rank, tail=tail)

    def metrics(self, name: str) -> dict[int, list[Step]]:
        """Job `name`'s step series per node rank, from its JSON step lines (every pod and
        container instance of the rank, in order: `Step.restart` counts them)."""
        from kdist.api.steps import read_metrics

        checks.name(name)
        return read_metrics(self._conn, name)

    def plot(self, name: str, file: PathLike) -> int:
        """Draw job `name`'s loss and samples/s per rank over steps into `file` (.png or
        .svg), restarts marked; the points drawn. Needs matplotlib (`kdist[plot]`)."""
        from kdist.api.drawing import check_plot, plot_steps
        from kdist.api.steps import read_metrics

        checks.name(name)
        path = checks.path(file, "file")
        check_plot(path, "file")
        return plot_steps(read_metrics(self._conn, name), path, title=f"job {name}",
                          what="file")

    def delete(self, name: str, *, wait: bool = True, timeout: float = 300) -> Deleted:
        """Delete job `name` (foreground: pods, Service, the job); with `wait`, until gone.

        Only kdist's objects: a Job or PyTorchJob `name` that kdist did not make is a
        UsageError, and nothing is deleted."""
        checks.name(name)
        checks.flag(wait, "wait")
        seconds = checks.seconds(timeout, "timeout")
        return jobs.delete(self._conn, name, wait=wait, timeout=seconds or 300)

    # -- many jobs ------------------------------------------------------------------------

    def wait_many(self, names: Sequence[str] = (), *, all_jobs: bool = False,
                  selector: str = "", timeout: float | None = None, check: bool = True,
                  on_update: Callable[[list[JobState]], None] | None = None,
                  on_end: Callable[[JobState], None] | None = None) -> list[JobState]:
        """Follow several jobs to their ends with one watcher (three watches, any count):
        `names`, or every kdist job (`all_jobs`), or those matching a label `selector`."""
        wanted = checks.names(names)
        checks.flag(all_jobs, "all_jobs")
        checks.selector(selector)  # before the first list, not inside the watcher
        timeout = checks.seconds(timeout, "timeout")
        checks.flag(check, "check")
        checks.callback(on_update, "on_update")
        checks.callback(on_end, "on_end")
        if not wanted and not all_jobs and not selector:
            raise UsageError("name at least one job, or use all_jobs / selector")
        return many.wait_many(self._conn, wanted, all_jobs=all_jobs, selector=selector,
                              timeout=timeout, check=check, on_update=on_update, on_end=on_end)

    def watch_jobs(self, *, on_update: Callable[[list[JobState]], None],
                   all_namespaces: bool = False, selector: str = "",
                   progress_every: float = 10.0,
                   stop: Callable[[], bool] = never) -> None:
        """Report every kdist job's state (and rank 0's last step) until `stop()` says so."""
        checks.callback(on_update, "on_update")
        checks.flag(all_namespaces, "all_namespaces")
        checks.selector(selector)
        every = checks.seconds(progress_every, "progress_every") or 10.0
        checks.callback(stop, "stop")
        many.watch_jobs(self._conn, all_namespaces=all_namespaces, selector=selector,
                        on_update=on_update, progress_every=every, stop=stop)

    def list_jobs(self, *, all_namespaces: bool = False,
                  selector: str = "") -> list[JobSummary]:
        """kdist's jobs of every backend (Indexed Jobs, JobSets, PyTorchJobs) in the
        namespace (or in all); with a label `selector` (as kubectl's -l), only those it
        matches."""
        from kdist.shared.selectors import SelectorProblem, check_selector

        checks.flag(all_namespaces, "all_namespaces")
        checks.text(selector, "selector")
        try:
            check_selector(selector)  # before any request
        except SelectorProblem as e:
            raise UsageError(f"selector: {e}") from None
        return jobs.list_jobs(self._conn, all_namespaces=all_namespaces, selector=selector)

    # -- a function or a script -----------------------------------------------------------

    def train(self, fn: Callable[..., Any] | PathLike, *, nodes: int = 1,
              procs_per_node: int = 1, args: Sequence[Any] | Mapping[str, Any] | None = None,
              image: str | None = None, backend: str = BACKEND_DEFAULT,
              workdir: PathLike | None = None, local: bool = False, name: str | None = None,
              timeout: float | None = None, logs: bool = True,
              env: Mapping[str, str] | None = None, resources: Mapping[str, Any] | None = None,
              spec: Mapping[str, Any] | None = None) -> Any:
        """Run `fn` (a function) or a script on every rank; rank 0's return value.

        The value travels as JSON (never pickled): None, bool, int, float, str, lists
        and tuples (back as lists), dicts with str keys; anything else (a tensor: return
        `.tolist()` or `.item()`) fails the job, naming where it sits in the value.
        `args`: a script's argument strings, or a function's arguments (a list, or a dict
        of keywords; JSON values). `workdir`: what to ship (default: the directory of
        the function's file, or of the script). `image`: required on a cluster (or
        `spec={"image": ...}`). `local=True` runs it here as
        `kdist run --local` does (every node a process group). `logs`: print the ranks'
        lines as `[rank N] ...`. `resources`, `spec`: spec fields (default 1 CPU, 2Gi
        per pod, gloo). An exception on a rank raises JobFailed naming it; `timeout`
        raises TimedOut (the job keeps running). See `kdist.api.calls`.
        """
        from kdist.api.calls import TrainCall, train

        call = TrainCall.make(fn, nodes=nodes, procs_per_node=procs_per_node, args=args,
                              image=image, backend=_backend(backend) or BACKEND_DEFAULT,
                              workdir=workdir, name=name, env=env,
                              namespace=self.options.namespace, resources=resources,
                              spec=spec)
        checks.flag(local, "local")
        checks.flag(logs, "logs")
        timeout = checks.seconds(timeout, "timeout")
        if not local and image is None and "image" not in (spec or {}):
            # No default is right for every cluster: kdist's own dev image exists only
            # where `make image` loaded it. A local run needs none.
            raise UsageError("image: train() on a cluster needs image= (an image with "
                             "torch and kdist, e.g. one built from image/Dockerfile), or "
                             "spec={'image': ...}; local=True needs none")
        return train(self._conn, call, local=local, timeout=timeout, logs=logs)

    # Last: inside the class body `list` would otherwise shadow the builtin in annotations.
    list = list_jobs


def _backend(value: Any) -> str | None:
    return checks.choice(value, "backend", (None, *BACKEND_NAMES))
