"""Launcher start to rank 0's first training step, on this machine (no cluster).

``python -m bench.launch_local [--rounds N] [--variant NAME=PATH ...]``

What ``cluster.start_to_first_step_s`` measures in a pod, without one: two
``python -m kdist.launch --module kdist.workloads.ddp`` processes (2 nodes x 1
process, gloo, master 127.0.0.1, the env contract an Indexed Job pod gets), started
together, each in a session of its own as a container would be; the clock runs
from their start to node 0's first ``step`` line (and, as the cluster figure
does, from node 0's first launcher line). Variants are kdist source trees put
first on ``PYTHONPATH`` (e.g. a copy of the tree before a change), run
interleaved round by round (each run in its tree: ``python -m`` puts the working
directory first on ``sys.path``); medians and the load average are printed.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.cluster import ARGS

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_env(root: str, node: int, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KDIST_", "TORCHELASTIC_"))}
    env.update({
        "KDIST_JOB_NAME": "bench", "KDIST_NNODES": "2", "KDIST_NPROC_PER_NODE": "1",
        "KDIST_NODE_RANK": str(node), "KDIST_MASTER_ADDR": "127.0.0.1",
        "KDIST_MASTER_PORT": str(port), "KDIST_DIST_BACKEND": "gloo",
        "KDIST_MAX_RESTARTS": "0", "KDIST_RDZV_TIMEOUT": "120", "KDIST_PG_TIMEOUT": "120",
        "OMP_NUM_THREADS": "1", "PYTHONPATH": root,
    })
    return env


def one_run(root: str, pin: bool = False) -> tuple[float, float]:
    """(process start -> first step, first launcher line -> first step) of node 0.

    ``pin``: node i (launcher and workers) on CPU i only, like pods of ``cpu: 1``.
    """
    port = _free_port()
    argv = [sys.executable, "-m", "kdist.launch", "--module", "kdist.workloads.ddp", "--", *ARGS]
    started = time.monotonic()
    cpus = sorted(os.sched_getaffinity(0))
    # Both streams in one, as a pod's log has them: only a step line is looked for, and the
    # first line of either stream is the container's first line.
    procs = [subprocess.Popen(argv, env=node_env(root, node, port), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True, cwd=root,
                              preexec_fn=_pin(cpus[node % len(cpus)]) if pin else None)
             for node in range(2)]
    first_line = step = None
    lines = []
    try:
        assert procs[0].stdout is not None
        for raw in procs[0].stdout:
            now = time.monotonic()
            lines.append(raw.decode(errors="replace"))
            if first_line is None:
                first_line = now
            if b'"event": "step"' in raw:
                step = now
                break
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pid in _descendants(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait()
    if step is None or first_line is None:
        raise SystemExit("no step line:\n" + "".join(lines[-30:]))
    return step - started, step - first_line


def _pin(cpu: int) -> Callable[[], None]:
    return lambda: os.sched_setaffinity(0, {cpu})


def _descendants(pid: int) -> list[int]:
    from kdist.local.runner import descendants

    return descendants(pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pin", action="store_true",
                        help="node i on CPU i only (pods of cpu: 1)")
    parser.add_argument("--variant", action="append", metavar="NAME=PATH",
                        help="a kdist source tree (default: this one, as 'now')")
    ns = parser.parse_args()
    variants = dict(v.split("=", 1) for v in ns.variant or [f"now={ROOT}"])
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for r in range(ns.rounds):
        for name, root in variants.items():
            t = one_run(root, ns.pin)
            results[name].append(t)
            print(f"round {r + 1} {name}: start->step {t[0]:.2f}s, first line->step "
                  f"{t[1]:.2f}s (load {os.getloadavg()[0]:.2f})", flush=True)
    for name, runs in results.items():
        print(f"{name}: median start->first step {statistics.median(t[0] for t in runs):.2f}s, "
              f"first launcher line->first step {statistics.median(t[1] for t in runs):.2f}s "
              f"over {len(runs)} runs")
    names = list(results)
    for name in names[1:]:  # each variant against the first, pair by pair (same round)
        ratios = [b[0] / a[0] for a, b in zip(results[names[0]], results[name], strict=True)]
        print(f"{name} / {names[0]}: median ratio {statistics.median(ratios):.2f} "
              f"({', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
