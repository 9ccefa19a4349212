"""`kdist run --local`'s output as a job's state: the live per-rank table `submit` shows.

The local runner writes every node's lines prefixed (``[rank N] `` from a
worker, ``[node I] `` from a launcher). `LocalView` is that stream: it keeps
a `JobState` as the cluster watch would (a row per node, its phase, its
restarts, step and loss from the JSON step lines, through the same
`Tracker`, fed one stand-in pod per node whose container restarts with each
attempt) and hands each line and each change to an observer (the CLI's live
table prints the lines above it).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from kdist.api.types import Observer

if TYPE_CHECKING:
    from kdist.kube.watch.tracker import JobState
    from kdist.spec.model import TrainingJob

#: What a partial line may grow to before it is handed on as it is.
MAX_PARTIAL = 64 * 1024


class LocalView:
    """A text stream for `run_local(stdout=)` that drives `observer` (thread-safe)."""

    def __init__(self, job: TrainingJob, observer: Observer) -> None:
        from kdist.kube.watch.tracker import Tracker
        from kdist.shared.facts import max_steps_from_args

        self.observer = observer
        self.nodes = job.spec.nodes
        procs = job.spec.procs_per_node
        self.procs = procs if isinstance(procs, int) else None  # "auto": one per GPU
        self.tracker = Tracker(job.metadata.name, "local")
        s = self.tracker.state
        s.kind, s.backend, s.nodes = "local run", job.spec.backend, self.nodes
        s.max_steps = max_steps_from_args(job.spec.workload.args or [])
        s.max_restarts = job.spec.distributed.max_restarts
        s.procs_per_node = self.procs
        for node in range(self.nodes):
            s.rank(node)
        self.restart = 0
        self._buf = ""
        self._lock = threading.Lock()
        self._started = False

    @property
    def state(self) -> JobState:
        return self.tracker.state

    def _pod(self, node: int, exit_code: int | None = None,
             interrupted: bool = False) -> dict[str, Any]:
        from kdist.shared import labels as L

        cstate: dict[str, Any]
        if exit_code is None:
            phase, cstate = "Running", {"running": {}}
        elif interrupted and exit_code:  # the user stopped it: no failure of its own
            phase, cstate = "Interrupted", {"terminated": {"exitCode": exit_code,
                                                          "reason": "Interrupted"}}
        else:
            phase = "Succeeded" if exit_code == 0 else "Failed"
            cstate = {"terminated": {"exitCode": exit_code,
                                     "reason": "Completed" if exit_code == 0 else "Error"}}
        name = f"node-{node}"
        return {"kind": "Pod", "metadata": {
            "name": name, "uid": name, "annotations": {
                L.COMPLETION_INDEX: str(node)}},
            "spec": {"nodeName": "localhost"},
            "status": {"phase": phase, "containerStatuses": [
                {"name": self.tracker.container, "restartCount": self.restart, "state": cstate}]}}

    def attempt(self, restart: int) -> None:
        """A new attempt of every node (`run_local(on_attempt=)`)."""
        with self._lock:
            self.restart = restart
            if not self._started:
                self._started = True
                self.observer.start(self.state)
            for node in range(self.nodes):
                self.tracker.pod_event("ADDED", self._pod(node))
            self.observer.update(self.state)

    def write(self, text: str) -> int:
        with self._lock:
            self._buf += text
            *lines, self._buf = self._buf.split("\n")
            if len(self._buf) > MAX_PARTIAL:
                lines, self._buf = [*lines, self._buf], ""
            for line in lines:
                self._line(line)
        return len(text)

    def _line(self, line: str) -> None:
        node, body = self._node_of(line)
        if node is not None:
            # A launcher's own line (`[node N] kdist.launch: ...`) is read as its pod's log
            # would show it; a worker's keeps its `[rank N] `, so that nothing it prints
            # reads as the launcher's (kdist.shared.records.launcher_said).
            self.tracker.log_line(f"node-{node}", line if line.startswith("[rank ") else body)
        say = getattr(self.observer, "message", None)  # the whole line, prefix and all
        if say is not None:
            say(line)
        else:
            self.observer.log(node, body)
        self.observer.update(self.state)

    def _node_of(self, line: str) -> tuple[int | None, str]:
        for word in ("[rank ", "[node "):
            if line.startswith(word):
                number, _, body = line[len(word):].partition("] ")
                if number.isdigit():
                    n = int(number)
                    if word == "[rank ":
                        n = n // self.procs if self.procs else 0
                    return (n if n < self.nodes else None), body
        return None, line

    def flush(self) -> None:
        pass

    def finish(self, code: int, *, interrupted: bool = False) -> None:
        """The run ended with `code` (`interrupted`: by Ctrl-C / SIGTERM, not by a node's
        failure): every row ends, and the job with it."""
        with self._lock:
            if not self._started:  # refused before any node started: nothing was shown
                return
            if self._buf:
                self._line(self._buf)
                self._buf = ""
            s = self.state
            for node in range(self.nodes):
                r = s.rank(node)
                self.tracker.pod_event("MODIFIED", self._pod(
                    node, 0 if code == 0 or r.done else code, interrupted))
            s.outcome = "Succeeded" if code == 0 else "Interrupted" if interrupted else "Failed"
            self.observer.update(s)
            self.observer.stop()


def run_local_watched(job: TrainingJob, observer: Observer, *, code: Any = None,
                      on_interrupt: Any = None, root: Any = None, on_ledger: Any = None,
                      **options: Any) -> int:
    """`kdist run --local` reporting to `observer` (a live table); the job's exit code."""
    from kdist.local import run_local

    view = LocalView(job, observer)
    exit_code = 1
    stopped: list[int] = []

    def interrupted(signum: int) -> None:
        stopped.append(signum)
        if on_interrupt is not None:
            on_interrupt(signum)

    try:
        exit_code = run_local(job, code=code, stdout=view,  # type: ignore[arg-type]
                              on_attempt=view.attempt, on_interrupt=interrupted, root=root,
                              on_ledger=on_ledger, **options)
        return exit_code
    finally:
        view.finish(exit_code, interrupted=bool(stopped))
