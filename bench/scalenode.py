"""The processes of `bench/scale.py`: node 0's launcher code, and many simulated launchers.

``python -m bench.scalenode lead N PORT`` runs node 0's real code: ``rendezvous.bind``,
``rendezvous.gather`` (which serves the ``MiniStore``), ``ExitBarrier``. ``python -m
bench.scalenode join N PORT FIRST LAST`` runs nodes FIRST..LAST, one thread each, with
the real client code (``gather`` off node 0, ``JobProgress.total``, ``ExitBarrier.wait``).
No torch, no workers.

They follow the orchestrator's lines on stdin: ``prep PHASE`` (the lead only: set up what
node 0 serves before the others start), ``go PHASE T`` (start at monotonic time T, the same
clock in every process) and ``end PHASE`` (the lead: stop, report). Each answers one JSON
line per line it was sent. The phases, in order:

- ``rendezvous``: every node joins (``gather``, restart count 0);
- ``progress``: node 0's launcher answers on the master port (``ExitBarrier.serve``, as
  once rank 0's worker is gone), and every node's watchdog adds its progress once, all at
  once (``JobProgress.total``: connect, ADD, CHECK of the restart key);
- ``restart``: node 0 asks for restart 1 (its new store says so) and every node meets it
  in a new rendezvous, bringing count 1 (every 10th: 0, a replaced pod); all agree on 1;
- ``barrier``: node 0's workers succeeded (``serve``, then ``wait``); every node's
  launcher waits in the exit barrier (``ExitBarrier.wait``).
"""

from __future__ import annotations

import dataclasses
import json
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from kdist.runtime import rendezvous as R
from kdist.runtime import store as S
from kdist.runtime.plan import LaunchPlan, resolve_env
from kdist.runtime.watchdog import JobProgress

PHASES = ("rendezvous", "progress", "restart", "barrier")


def plan_of(nnodes: int, node: int, port: int) -> LaunchPlan:
    """Node ``node``'s plan; past kdist's own limit (``limits.MAX_NODES``) by replacement,
    which the protocols do not look at."""
    one = resolve_env({"KDIST_JOB_NAME": "scale", "KDIST_NNODES": "2",
                       "KDIST_NPROC_PER_NODE": "1", "KDIST_NODE_RANK": "0",
                       "KDIST_MASTER_ADDR": "127.0.0.1", "KDIST_MASTER_PORT": str(port),
                       "KDIST_DIST_BACKEND": "gloo", "KDIST_RDZV_TIMEOUT": "120"})
    return dataclasses.replace(one, nnodes=nnodes, node_rank=node)


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def wait_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


class Counted(S.MiniStore):
    """The store, counting the queries and connections it serves (the bench's only hook)."""

    queries = 0
    accepted = 0

    def _query(self, conn: Any, buf: bytes) -> int:
        used = super()._query(conn, buf)
        Counted.queries += 1
        return used

    def _accept(self) -> None:
        before = len(self._conns)
        super()._accept()
        Counted.accepted += len(self._conns) - before


def lead(nnodes: int, port: int) -> None:
    R.MiniStore = Counted  # type: ignore[misc]  # what gather and ExitBarrier start
    plan = plan_of(nnodes, 0, port)
    listener = R.bind(plan)
    assert listener is not None
    barrier: R.ExitBarrier | None = None
    state: dict[str, Any] = {}
    say(ready=True, rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    for line in sys.stdin:
        word, phase, *rest = line.split()
        if word == "prep":
            if phase in ("progress", "restart", "barrier"):
                # rank 0's worker is gone; it succeeded only before the barrier
                barrier = R.ExitBarrier(plan, listener)
                barrier.serve(finished=phase == "barrier")
            # counted from here: the others start only after this answer
            Counted.queries = Counted.accepted = 0
            state.update(cpu0=_cpu(), agreed=None)
            say(prepped=phase)
        elif word == "go":
            t = float(rest[0])
            wait_until(t)
            if phase == "rendezvous":
                state["agreed"] = R.gather(plan, listener, t)[1]
            elif phase == "restart":
                assert barrier is not None
                barrier.stop()  # as the agent's run() ends; then the launcher meets again
                barrier = None
                state["agreed"] = R.gather(dataclasses.replace(plan, restart_count=1),
                                           listener, t, 1)[1]
            elif phase == "barrier":
                assert barrier is not None
                why = barrier.wait(limit_s=120)
                if why:
                    raise SystemExit(f"node 0's exit barrier: {why}")
            state["done"] = time.monotonic()
        else:  # end
            if barrier is not None:
                barrier.stop()
                barrier = None
            say(phase=phase, cpu_s=_cpu() - state["cpu0"],
                rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                queries=Counted.queries, connections=Counted.accepted, done=state["done"],
                agreed=state["agreed"])
    listener.close()


def torch_lead(nnodes: int, port: int, libuv: int) -> None:
    """Node 0 while its workers run: rank 0's worker serves torch's own TCPStore on the
    master port (kdist's worker hook, ``serve_store``, the real code), libuv's or the
    classic one (``USE_LIBUV=0``, a torch built without libuv); only ``progress``."""
    from kdist.runtime.sitehook import sitecustomize

    S.allow_many_connections()
    listener = R.bind(plan_of(nnodes, 0, port))
    assert listener is not None
    sitecustomize.serve_store(listener.fileno(), {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "KDIST_PG_TIMEOUT": "120",
        "USE_LIBUV": str(libuv)})
    state: dict[str, Any] = {}
    say(ready=True, rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    for line in sys.stdin:
        word, phase, *rest = line.split()
        if word == "prep":
            state.update(cpu0=_cpu())
            say(prepped=phase)
        elif word == "go":
            state["done"] = float(rest[0])
        else:
            say(phase=phase, cpu_s=_cpu() - state["cpu0"],
                rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                queries=0, connections=0, done=state["done"], agreed=None)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Output:
    """What ``JobProgress`` reads of a node's workers' output: a progress count."""

    def __init__(self) -> None:
        self.count = 0

    def progress(self) -> int:
        self.count += 1
        return self.count


def _node(plan: LaunchPlan, phase: str, t: float) -> Any:
    if phase == "rendezvous":
        return R.gather(plan, None, t)[1]
    if phase == "restart":
        count = 0 if plan.node_rank % 10 == 0 else 1
        return R.gather(dataclasses.replace(plan, restart_count=count), None, t, count)[1]
    if phase == "progress":
        progress = JobProgress(plan, _Output())  # type: ignore[arg-type]
        try:
            total = progress.total()
        finally:
            if progress._store is not None:
                progress._store.close()
        if not progress._answered:
            raise RuntimeError("node 0's store did not answer the watchdog")
        return total
    why = R.ExitBarrier(plan, None).wait(limit_s=120)
    if why:
        raise RuntimeError(f"exit barrier: {why}")
    return None


def join(nnodes: int, port: int, first: int, last: int) -> None:
    S.allow_many_connections()
    threading.stack_size(256 * 1024)
    plans = [plan_of(nnodes, i, port) for i in range(first, last + 1)]
    go = threading.Event()
    current: dict[str, Any] = {}
    results: list[tuple[float, Any, str]] = []
    lock = threading.Lock()
    finished = threading.Semaphore(0)

    def node(plan: LaunchPlan) -> None:
        while True:
            go.wait()
            phase, t = current["phase"], current["t"]
            try:
                value, problem = _node(plan, phase, t), ""
            except Exception as e:  # reported with the phase's figures
                value, problem = None, f"node {plan.node_rank}: {type(e).__name__}: {e}"
            after = current["next"]  # before the release: then the next phase's is set up
            with lock:
                results.append((time.monotonic(), value, problem))
            finished.release()
            after.wait()

    current["next"] = threading.Event()
    threads = [threading.Thread(target=node, args=(p,), daemon=True) for p in plans]
    for th in threads:
        th.start()
    say(ready=True)
    for line in sys.stdin:
        _, phase, t = line.split()
        results.clear()
        current.update(phase=phase, t=float(t))
        wait_until(float(t))
        go.set()
        for _ in plans:
            finished.acquire()
        go.clear()
        previous, current["next"] = current["next"], threading.Event()
        previous.set()
        say(phase=phase, done=max(r[0] for r in results),
            values=sorted({str(r[1]) for r in results}),
            errors=[r[2] for r in results if r[2]][:3], failed=sum(1 for r in results if r[2]))


def main(argv: list[str]) -> int:
    role, numbers = argv[0], [int(a) for a in argv[1:]]
    roles: dict[str, Callable[..., None]] = {"lead": lead, "join": join,
                                         "torchlead": torch_lead}
    roles[role](*numbers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
