"""`kdist status` of a running 1,000-pod job against the fake API server of `tests/api`
(no cluster, no kwok): the path before issue 53's third slice beside today's.

The job is an Indexed Job of 1,000 pods as kube-apiserver lists them (``objects.full_pod``:
~5.9 KB each, ~6 MB in one list, as kdist's pods on kwok's nodes are), each with a log of
kdist's step lines. The server answers each GET from the bytes it sent the first time
(`FakeApi.memo_gets`): its own encoding, Python's, is not what is timed; logs are
answered as they are, without Nagle's wait (TCP_NODELAY, as kube-apiserver answers: with
it, each kept-alive request waited ~40 ms for a delayed ACK: ~0.3 s of the 0.81 s was the
fake's). Each command is a process of its own, its bytecode cached as an installed kdist's:
its wall time, its CPU seconds and peak memory (`wait4`), the requests it sent and the
largest answer it decoded.

- *before*: every operator's kind asked of discovery before the job (3 requests), the pods
  in one answer decoded whole (`POD_PAGE` set past the job's size: one page);
- *now*: the job first (built in: no discovery), its pods `POD_PAGE` at a time, each page
  let go before the next is read.

Both then read the same 32 logs, 8 at a time, and print the same `-o json`.
``python -m bench.scalestatus [--pods 1000] [--rounds 3]`` prints the table;
``make bench`` (`bench.scale`) records `scale.status_1000_pods_s` and its neighbours.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import PYTHON, REPO, BenchError, Ctx, Measured, Spec, peak_rss_kb, tail

PODS = 1000
# The path before: every operator's kind discovered first, the pods in one page.
BEFORE = ("import sys\n"
          "import kdist.shared.limits as limits\n"
          "from kdist.kube.client import Cluster\n"
          "limits.POD_PAGE = 10 ** 9\n"
          "now = Cluster.get_job\n"
          "def get_job(self, name, namespace):\n"
          "    self.training_kinds()\n"
          "    return now(self, name, namespace)\n"
          "Cluster.get_job = get_job\n"
          "from kdist.cli import main\n"
          "sys.argv[0] = 'kdist'\n"
          "main()\n")
A = "kdist status -o json, a process (fake API: tests/api, answers memoized)"
BEFORE_B = "the path before (discovery first, one whole list)"
FIGURES = [
    Spec("scale.status_1000_pods_s", "kdist status of a running 1,000-pod job, fake API", "s",
         A, BEFORE_B, "<= 1 s", 1.0, higher_is_better=False),
    Spec("scale.status_1000_pods_vs_before", "...: wall time, now / before", "x", A,
         BEFORE_B),
    Spec("scale.status_1000_pods_peak_mb", "...: peak memory (RSS)", "MB", A, BEFORE_B),
    Spec("scale.status_1000_pods_requests", "...: API requests", "requests", A,
         "(1 + pages + 32 logs)"),
    Spec("scale.status_1000_pods_largest_answer_mb", "...: the largest answer decoded", "MB",
         A, BEFORE_B),
]
_SCRUB = ("KUBECONFIG", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY",
          "all_proxy", "NO_PROXY", "no_proxy")


@dataclass
class Cost:
    wall_s: float
    cpu_s: float
    rss_mb: float
    requests: int
    largest_answer_mb: float

    def brief(self) -> str:
        return (f"{self.wall_s:.2f} s, {self.cpu_s:.2f} s CPU, {self.rss_mb:.0f} MB peak, "
                f"{self.requests} requests, largest answer {self.largest_answer_mb:.2f} MB")


class Job:
    """The fake API server holding the job, and a kubeconfig for it (a context manager)."""

    def __init__(self, pods: int = PODS) -> None:
        from tests.api import objects
        from tests.api.fakeapi import FakeApi
        from tests.api.kubeconfigs import write_kubeconfig

        self.pods = pods
        self.api = FakeApi(memo_gets=True).start()
        job = self.api.add(objects.job("big", nodes=pods))[0]
        for rank in range(pods):
            self.api.add(objects.full_pod(job, rank))
            self.api.set_log(f"big-{rank}-abcde", objects.step_log(rank, world=pods))
        self._dir = tempfile.TemporaryDirectory()
        self.kubeconfig = write_kubeconfig(Path(self._dir.name) / "kubeconfig", self.api.url)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.api.stop()
        self._dir.cleanup()

    def status(self, path: str) -> tuple[Cost, str]:
        """One `kdist status big -o json` by `path` ("before" or "now"): its cost, stdout."""
        args = ["--kubeconfig", str(self.kubeconfig), "status", "big", "-o", "json"]
        cmd = [PYTHON, "-c", BEFORE, *args] if path == "before" else \
            [PYTHON, "-m", "kdist", *args]
        env = {k: v for k, v in os.environ.items()
               if k not in _SCRUB and k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        # Bytecode written once (the uncounted first runs) and read after, as an installed
        # kdist has it (pip compiles on install); kept out of the tree.
        env["PYTHONPYCACHEPREFIX"] = str(Path(self._dir.name) / "pycache")
        mark = self.api.mark()
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            started = time.monotonic()
            p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=err, text=True)
            peak_kb = 0
            while True:  # not wait4's ru_maxrss: it counts this process's (harness)
                peak_kb = max(peak_kb, peak_rss_kb(p.pid, tree=False))
                pid, code, usage = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                time.sleep(0.005)
            wall = time.monotonic() - started
            p.returncode = os.waitstatus_to_exitcode(code)
            out.seek(0)
            err.seek(0)
            text, errors = out.read(), err.read()
        if os.waitstatus_to_exitcode(code) != 0:
            raise BenchError(f"kdist status ({path}) exited {os.waitstatus_to_exitcode(code)}:"
                             f"\n{tail(errors or text)}")
        sent = self.api.since(mark)
        sizes = self.api.answered(sent)
        return Cost(wall, usage.ru_utime + usage.ru_stime, peak_kb / 1024, len(sent),
                    max(sizes) / 1e6), text


def compare(pods: int, rounds: int, say: Any) -> dict[str, list[Cost]]:
    """`rounds` interleaved pairs (before, now) against one server; checks that both
    print the same ranks."""
    import json

    got: dict[str, list[Cost]] = {"before": [], "now": []}
    with Job(pods) as job:
        for path in got:  # the server's answers made once (memo_gets), the bytecode
            job.status(path)  # written: uncounted
        for r in range(rounds):
            shown = {}
            for path in got:
                cost, text = job.status(path)
                got[path].append(cost)
                shown[path] = json.loads(text)["ranks"]
                say(f"   round {r + 1}, {path}: {cost.brief()}")
            if shown["before"] != shown["now"]:
                raise BenchError("kdist status showed other ranks before and now")
    return got


def medians(costs: list[Cost]) -> Cost:
    return Cost(*(statistics.median(getattr(c, f) for c in costs)
                  for f in ("wall_s", "cpu_s", "rss_mb", "requests", "largest_answer_mb")))


def table(pods: int, got: dict[str, list[Cost]]) -> str:
    rows = [f"kdist status of a running {pods:,}-pod job (fake API, medians of "
            f"{len(got['now'])})",
            "| path | wall (s) | CPU (s) | peak memory (MB) | requests | largest answer (MB) |",
            "| --- | --- | --- | --- | --- | --- |"]
    for path, costs in got.items():
        m = medians(costs)
        rows.append(f"| {path} | {m.wall_s:.2f} | {m.cpu_s:.2f} | {m.rss_mb:.0f} | "
                    f"{m.requests:.0f} | {m.largest_answer_mb:.2f} |")
    return "\n".join(rows)


def run(ctx: Ctx) -> dict[str, Measured]:
    """The figures for ``bench.run``: `ctx.rounds` interleaved pairs at 1,000 pods."""
    got = compare(PODS, ctx.rounds, ctx.say)
    ctx.say(table(PODS, got))
    before, now = medians(got["before"]), medians(got["now"])
    walls = [c.wall_s for c in got["now"]]
    ratios = [n.wall_s / b.wall_s for n, b in zip(got["now"], got["before"], strict=True)]
    vs = f"before: {before.brief()}"
    return {
        "scale.status_1000_pods_s": Measured(statistics.median(walls), walls,
                                             f"{now.brief()}; {vs}"),
        "scale.status_1000_pods_vs_before": Measured(statistics.median(ratios), ratios),
        "scale.status_1000_pods_peak_mb": Measured(now.rss_mb, [c.rss_mb for c in got["now"]],
                                                   f"before: {before.rss_mb:.0f} MB"),
        "scale.status_1000_pods_requests": Measured(now.requests, [],
                                                    f"before: {before.requests:.0f}"),
        "scale.status_1000_pods_largest_answer_mb": Measured(
            now.largest_answer_mb, [], f"before: {before.largest_answer_mb:.2f} MB"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scalestatus",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=PODS, help="pods of the job (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved pairs; medians shown")
    args = p.parse_args(argv)
    got = compare(args.pods, args.rounds, lambda line: print(line, file=sys.stderr, flush=True))
    print(table(args.pods, got))
    return 0


if __name__ == "__main__":
    sys.exit(main())
