"""The launchers' protocols at scale, by simulation: node 0's real launcher code against
N-1 simulated launchers (the real client code, a thread each), on this machine.

``python -m bench.scale [--sizes 16,64,256,1024] [--rounds 3]`` prints a table per N;
``make bench`` (``bench.run``) runs the short form (N = 64 and 1,024) for the figures.

Per round and N: one process runs node 0's launcher code (``bench.scalenode lead``), and
``JOINERS`` processes run the other N-1 nodes, a thread each (``bench.scalenode join``),
so that the clients' Python is not one interpreter's lock. Every process raises its
open-files limit to the hard limit, as a pod would have it. Each protocol starts in every
process at the same instant (the monotonic clock is the machine's) and its time is the
last node's finish. Node 0's CPU seconds and its queries and connections served are
counted in its process, per protocol; its peak memory (RSS) over the whole round.

The time includes the harness's own work: N-1 Python clients on the same 2 cores.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from bench import scalestatus
from bench.harness import (
    PYTHON,
    REPO,
    BenchError,
    Ctx,
    Measured,
    Spec,
    clean_env,
    free_port,
    kill_session,
)
from bench.scalenode import PHASES

JOINERS = 4
START_S = 0.2  # between "go" and the start: every process has read the line by then
SIZES = (16, 64, 256, 1024)
GOAL_S = 2.0
A = "node 0's launcher code (bench.scalenode lead) and N-1 launchers' client code as threads"
TITLES = {"rendezvous": "rendezvous", "progress": "one watchdog tick, all nodes at once",
          "restart": "restart agreed (a new rendezvous, counts differ)",
          "barrier": "exit barrier"}

FIGURES = [
    *(Spec(f"scale.{p}_1024_s", f"{TITLES[p]}, 1,024 nodes", "s", A, "(absolute)",
           f"<= {GOAL_S:.0f} s", GOAL_S, higher_is_better=False) for p in PHASES),
    Spec("scale.rendezvous_64_s", "rendezvous, 64 nodes", "s", A, "(absolute)"),
    Spec("scale.rendezvous_growth_64_to_1024", "rendezvous time, 1,024 nodes / 64 nodes "
         "(linear: 16)", "x", A, "64 nodes", "<= 16", 16.0, higher_is_better=False),
    Spec("scale.node0_cpu_1024_s", "node 0's CPU seconds, all four protocols, 1,024 nodes",
         "s", A, "(absolute)"),
    Spec("scale.node0_peak_rss_1024_mib", "node 0's peak memory (RSS), 1,024 nodes", "MiB",
         A, "(absolute)"),
    Spec("scale.queries_per_node_1024", "store queries per node, all four protocols",
         "queries", A, "(absolute)"),
    *scalestatus.FIGURES,
]


class _Proc:
    def __init__(self, args: list[str]) -> None:
        self.name = " ".join(args)
        self.proc = subprocess.Popen([PYTHON, "-m", "bench.scalenode", *args], cwd=REPO,
                                     env=clean_env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1,
                                     start_new_session=True)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise BenchError(f"bench.scalenode {self.name} ended "
                             f"(exit {self.proc.wait()})") from None

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise BenchError(f"bench.scalenode {self.name} ended "
                             f"(exit {self.proc.wait()})")
        return dict(json.loads(line))

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            kill_session(self.proc)


def one_round(n: int, phases: tuple[str, ...] = PHASES,
              libuv: int | None = None) -> dict[str, dict[str, float]]:
    """Every protocol once at ``n`` nodes: per protocol its seconds, node 0's CPU seconds,
    queries and connections per node; and node 0's peak RSS. ``libuv`` (0 or 1): torch's
    TCPStore serves node 0's side instead, as in rank 0's worker (``progress`` only)."""
    port = free_port()
    lead = _Proc(["lead", str(n), str(port)] if libuv is None else
                 ["torchlead", str(n), str(port), str(libuv)])
    others = []
    try:
        lead.read()
        per = (n - 1 + JOINERS - 1) // JOINERS
        for first in range(1, n, per):
            others.append(_Proc(["join", str(n), str(port), str(first),
                                 str(min(n - 1, first + per - 1))]))
        for p in others:
            p.read()
        out: dict[str, dict[str, float]] = {}
        for phase in phases:
            lead.send(f"prep {phase}")
            lead.read()
            t = time.monotonic() + START_S
            for p in (lead, *others):
                p.send(f"go {phase} {t}")
            joined = [p.read() for p in others]
            lead.send(f"end {phase}")
            led = lead.read()
            problems = [e for j in joined for e in j["errors"]]
            if problems and libuv is None:
                raise BenchError(f"{phase} at {n} nodes: {problems[0]}")
            if phase in ("rendezvous", "restart"):
                values = {v for j in joined for v in j["values"]} | {str(led["agreed"])}
                want = "1" if phase == "restart" else "0"
                if values != {want}:
                    raise BenchError(f"{phase} at {n} nodes: counts {sorted(values)}")
            out[phase] = {"s": max([led["done"], *(j["done"] for j in joined)]) - t,
                          "cpu_s": led["cpu_s"], "queries": led["queries"] / (n - 1),
                          "connections": led["connections"] / (n - 1),
                          "rss_mib": led["rss_kib"] / 1024,
                          "failed": sum(j["failed"] for j in joined)}
        return out
    finally:
        for p in (*others, lead):
            p.close()


def measure(sizes: list[int], rounds: int, say: Any,
            libuv: int | None = None) -> dict[int, dict[str, dict[str, float]]]:
    """Per N and protocol, the median of ``rounds`` rounds of each measure."""
    phases = PHASES if libuv is None else ("progress",)
    got: dict[int, list[dict[str, dict[str, float]]]] = {n: [] for n in sizes}
    for r in range(rounds):
        for n in sizes:  # every size in each round: they see the same conditions
            got[n].append(one_round(n, phases, libuv))
            say(f"   round {r + 1}, {n} nodes: " + ", ".join(
                f"{p} {got[n][-1][p]['s']:.2f}s" for p in phases))
    return {n: {p: {k: statistics.median(x[p][k] for x in runs) for k in runs[0][p]}
                for p in phases} for n, runs in got.items()}


def table(n: int, figures: dict[str, dict[str, float]]) -> str:
    rss = max(f["rss_mib"] for f in figures.values())
    rows = [f"N = {n} (node 0's peak RSS {rss:.0f} MiB)",
            "| protocol | time (s) | node 0 CPU (s) | queries per node | connections per node "
            "| nodes failed |", "| --- | --- | --- | --- | --- | --- |"]
    for p, f in figures.items():
        counted = (f"{f['queries']:.1f} | {f['connections']:.1f}" if f["connections"] else
                   "not counted | not counted")  # torch's store: not counted
        rows.append(f"| {TITLES[p]} | {f['s']:.3f} | {f['cpu_s']:.3f} | {counted} "
                    f"| {f['failed']:.0f} |")
    return "\n".join(rows)


def run(ctx: Ctx) -> dict[str, Measured]:
    """The short form, for ``bench.run``: 64 and 1,024 nodes; then `kdist status` of a
    1,000-pod job against the fake API (`bench.scalestatus`)."""
    out = _protocols(ctx)
    out.update(scalestatus.run(ctx))
    return out


def _protocols(ctx: Ctx) -> dict[str, Measured]:
    rounds = ctx.rounds
    samples: dict[int, list[dict[str, dict[str, float]]]] = {64: [], 1024: []}
    for r in range(rounds):
        for n in samples:
            samples[n].append(one_round(n))
        ctx.say(f"   round {r + 1}: " + ", ".join(
            f"{p} {samples[1024][-1][p]['s']:.2f}s" for p in PHASES) + " at 1,024 nodes")
    big = samples[1024]

    def of(n: int, p: str, k: str = "s") -> list[float]:
        return [x[p][k] for x in samples[n]]

    out = {f"scale.{p}_1024_s": Measured(statistics.median(of(1024, p)), of(1024, p))
           for p in PHASES}
    growth = [a / b for a, b in zip(of(1024, "rendezvous"), of(64, "rendezvous"), strict=True)]
    cpu = [sum(x[p]["cpu_s"] for p in PHASES) for x in big]
    queries = [sum(x[p]["queries"] for p in PHASES) for x in big]
    rss = [x["barrier"]["rss_mib"] for x in big]
    out.update({
        "scale.rendezvous_64_s": Measured(statistics.median(of(64, "rendezvous")),
                                          of(64, "rendezvous")),
        "scale.rendezvous_growth_64_to_1024": Measured(statistics.median(growth), growth),
        "scale.node0_cpu_1024_s": Measured(statistics.median(cpu), cpu),
        "scale.node0_peak_rss_1024_mib": Measured(max(rss), rss),
        "scale.queries_per_node_1024": Measured(statistics.median(queries), queries,
                                                note="connections per node: " + ", ".join(
                                                    f"{p} {big[0][p]['connections']:.1f}"
                                                    for p in PHASES)),
    })
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default=",".join(map(str, SIZES)),
                   help="numbers of nodes, comma-separated (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; medians are shown")
    p.add_argument("--torch-store", choices=("libuv", "classic"),
                   help="node 0 as while its workers run: torch's TCPStore (libuv's, or the "
                        "classic one of USE_LIBUV=0) served by kdist's worker hook; only the "
                        "watchdog tick")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < max(sizes) + 100:
        p.error(f"the hard limit on open files is {hard}: too few for {max(sizes)} nodes")
    libuv = None if args.torch_store is None else int(args.torch_store == "libuv")
    medians = measure(sizes, args.rounds, lambda line: print(line, file=sys.stderr, flush=True),
                      libuv)
    for n in sizes:
        print(table(n, medians[n]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
