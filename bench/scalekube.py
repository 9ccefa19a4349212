"""The API side at 1,000 nodes: kdist against kwok's fake nodes, kubectl beside it.

kwok (tests/cluster/kwok.sh) attaches N fake nodes to the single-node test cluster; the
pods of the jobs here land on them only (taint + selector) and kwok runs them: Running at
once, Succeeded after their `run-for` label, or Failed when the benchmark annotates them.
Each client command goes through its own counting proxy (`bench.apiproxy`), and the
command's own rusage gives its CPU seconds and peak memory (`bench.kwok.measure`). kdist
and kubectl do each job side by side, at the same time, on the same cluster:

1. submit --wait of one N-node Indexed Job (with its PodGroup, gang: native) and of one
   N-node JobSet: `kdist submit --wait` vs `kubectl apply -f <kdist render's objects> &&
   kubectl wait --for=condition=complete` (a job each, created together);
2. status and list of a running N-pod job: `kdist status` vs `kubectl get job` + `kubectl
   get pods -l`; `kdist list` vs `kubectl get jobs -l`; `kdist logs` (every rank's log);
3. a gang restart: `kdist submit --wait` of an N-node job (maxRestarts 1), `kubectl wait`
   on it beside; every pod exits 137 (retryable), the Job controller recreates them, the
   new ones exit 0; kdist's warning lines are counted;
4. delete of the two finished N-node jobs: `kdist delete` vs `kubectl delete
   --cascade=foreground --wait`, together;
5. J jobs of 8 nodes, suspended, then started together, watched by one `kdist wait --all`
   and one `kubectl wait --all`.

Run: `python -m bench.run --only scalekube` (N = 1,000, J = 200; --quick: N = 100, J = 20);
`KDIST_BENCH_SCALEKUBE=status` runs only part 2, on a job started for it (minutes, not ~30).
`KDIST_BENCH_SCALEKUBE=submit` runs only submit --wait, kdist and kubectl each alone, one
after the other (the order swapped every round), `--rounds` rounds at N nodes: their times
are then each the cluster's for one job, not two jobs' sharing one Job controller.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from bench import kube
from bench.cli import compile_kdist
from bench.harness import PYTHON, BenchError, Ctx, Measured, Spec, median, tail
from bench.kwok import Cost, end_pods, fake_nodes, job_text, measure, pods, wait_running

NODES, NODES_QUICK = 1000, 100
JOBS, JOBS_QUICK = 200, 20
KDIST = "kdist (one process per verb)"
KUBECTL = "kubectl doing the same"

FIGURES = [
    Spec("scale.status_kwok_1000_pods_s", "kdist status of a running 1,000-pod job, kwok", "s",
         KDIST, "(goal)", "<= 1 s", 1.0, higher_is_better=False),
    Spec("scale.status_vs_kubectl_1000", "kdist status / kubectl get job + get pods, 1,000 pods",
         "x", KDIST, KUBECTL),
    Spec("scale.status_requests_1000", "API requests of one kdist status, 1,000 pods",
         "requests", KDIST, "(absolute: 32 logs at most)"),
    Spec("scale.list_1000_pods_s", "kdist list beside a 1,000-pod job", "s", KDIST, "(absolute)"),
    Spec("scale.logs_1000_pods_s", "kdist logs of a 1,000-pod job (every rank's log)", "s",
         KDIST, "(absolute)"),
    Spec("scale.submit_wait_1000_vs_kubectl", "submit --wait, 1,000-node Indexed Job + PodGroup: "
         "kdist / kubectl apply + wait", "x", KDIST, KUBECTL, "<= 1.1", 1.1,
         higher_is_better=False),
    Spec("scale.submit_wait_1000_s", "kdist submit --wait, 1,000-node Indexed Job", "s", KDIST,
         "(absolute)"),
    Spec("scale.submit_wait_alone_vs_kubectl", "submit --wait, N-node Indexed Job + PodGroup "
         "(20 s), each alone in turn: kdist / kubectl apply + wait", "x", KDIST, KUBECTL,
         "<= 1.1", 1.1, higher_is_better=False),
    Spec("scale.submit_wait_alone_s", "kdist submit --wait alone, N-node Indexed Job (20 s)",
         "s", KDIST, "(absolute)"),
    Spec("scale.watch_watches_alone", "kdist submit --wait alone: watches held at once",
         "watches", KDIST, "(job, pods)", "<= 2", 2, higher_is_better=False),
    Spec("scale.submit_wait_jobset_1000_vs_kubectl", "submit --wait, 1,000-node JobSet: kdist / "
         "kubectl", "x", KDIST, KUBECTL, "<= 1.1", 1.1, higher_is_better=False),
    Spec("scale.watch_peak_mb_1000", "kdist submit --wait's peak memory, 1,000 pods", "MB",
         KDIST, "(goal)", "<= 200 MB", 200, higher_is_better=False),
    Spec("scale.watch_watches_1000", "kdist submit --wait: watches held at once, 1,000 pods",
         "watches", KDIST, "(job, pods, PodGroup)", "<= 3", 3, higher_is_better=False),
    Spec("scale.watch_follows_1000", "kdist submit --wait: logs followed at once, 1,000 pods",
         "streams", KDIST, "(nodes 0-31)", "<= 32", 32, higher_is_better=False),
    Spec("scale.submit_requests_per_pod_1000", "kdist submit --wait: API requests per pod",
         "requests", KDIST, "(flat in N: the same at 100)"),
    Spec("scale.restart_warnings_1000", "kdist submit --wait through a 1,000-pod gang restart: "
         "warning lines", "lines", KDIST, "(bounded)", "<= 20", 20, higher_is_better=False),
    Spec("scale.restart_wait_vs_kubectl_cpu_1000", "...: its CPU / kubectl wait's on the same "
         "job", "x", KDIST, KUBECTL),
    Spec("scale.delete_1000_vs_kubectl", "delete of a finished 1,000-node job: kdist / kubectl "
         "delete --cascade=foreground --wait", "x", KDIST, KUBECTL),
    Spec("scale.wait_all_watches_200x8", "one kdist wait --all over 200 jobs of 8 nodes: watches "
         "held at once", "watches", KDIST, "(goal)", "<= 2", 2, higher_is_better=False),
    Spec("scale.wait_all_peak_mb_200x8", "...: its peak memory", "MB", KDIST, "(goal)",
         "<= 200 MB", 200, higher_is_better=False),
    Spec("scale.wait_all_requests_per_job_200x8", "...: API requests per job", "requests", KDIST,
         "(absolute)"),
    Spec("scale.wait_all_vs_kubectl_cpu_200x8", "...: CPU, kdist wait --all / kubectl wait --all",
         "x", KDIST, KUBECTL),
]


def _kdist(proxy: Any, ns: str, *args: str) -> list[str]:
    return [PYTHON, "-m", "kdist", "--kubeconfig", str(proxy.kubeconfig), "-n", ns, *args]


def _kubectl(proxy: Any, ns: str, cache: str, *args: str) -> list[str]:
    return ["kubectl", "--kubeconfig", str(proxy.kubeconfig), "--cache-dir", cache, "-n", ns,
            *args]


def _sh(*cmds: list[str]) -> list[str]:
    return ["sh", "-c", " && ".join(shlex.join(c) for c in cmds)]


def _together(*calls: Any) -> list[Cost]:
    """Run measure() calls at the same time (side by side); their Costs, in order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result() for f in [pool.submit(c) for c in calls]]


def _rendered_file(text: str, path: Path) -> Path:
    """kdist render's objects of `text`, for kubectl apply (what kdist submit creates)."""
    path.write_text(yaml.safe_dump_all(kube.rendered(text), sort_keys=False))
    return path


def _submits(api: Any, pk: Any, pc: Any, ns: str, cache: str, tmp: Path, n: int,
             backend: str, ctx: Ctx) -> tuple[Cost, Cost]:
    gang = "native" if backend == "indexed-job" else "none"
    mine, theirs = f"kd-{backend[:3]}", f"kc-{backend[:3]}"
    spec = tmp / f"{mine}.yaml"
    spec.write_text(job_text(mine, ns, nodes=n, run_for="20s", backend=backend, gang=gang))
    objs = _rendered_file(job_text(theirs, ns, nodes=n, run_for="20s", backend=backend,
                                   gang=gang), tmp / f"{theirs}.yaml")
    kind = "job" if backend == "indexed-job" else "jobset"
    kd, kc = _together(
        lambda: measure(_kdist(pk, ns, "submit", str(spec), "--timeout", "900"), pk),
        lambda: measure(_sh(_kubectl(pc, ns, cache, "apply", "-f", str(objs)),
                            _kubectl(pc, ns, cache, "wait", "--for=condition=complete"
                                     if kind == "job" else "--for=condition=Completed",
                                     f"{kind}/{theirs}", "--timeout=900s")), pc))
    ctx.say(f"    submit --wait {backend} x{n}: kdist {kd.brief()}\n"
            f"                          kubectl {kc.brief()}")
    return kd, kc


def _status_list_logs(pk: Any, pc: Any, ns: str, cache: str, name: str, ctx: Ctx,
                      out: dict[str, Measured], n: int) -> None:
    kd_s, kc_s, ratios, reqs, lists = [], [], [], [], []
    for _ in range(ctx.rounds):
        kd = measure(_kdist(pk, ns, "status", name), pk)
        kc = measure(_sh(_kubectl(pc, ns, cache, "get", "job", name),
                         _kubectl(pc, ns, cache, "get", "pods", "-l",
                                  f"kdist.dev/job-name={name}", "-o", "wide")), pc)
        kd_s.append(kd.wall_s)
        kc_s.append(kc.wall_s)
        ratios.append(kd.wall_s / kc.wall_s)
        reqs.append(kd.requests)
        lists.append(measure(_kdist(pk, ns, "list"), pk).wall_s)
    ctx.say(f"    status x{n}: kdist {kd_s}, kubectl {kc_s}; last: {kd.brief()}")
    out["scale.status_kwok_1000_pods_s"] = Measured(
        median(kd_s), kd_s, f"{n} pods; kubectl get job + get pods: {median(kc_s):.2f} s")
    out["scale.status_vs_kubectl_1000"] = Measured(median(ratios), ratios)
    out["scale.status_requests_1000"] = Measured(median(reqs), reqs)
    out["scale.list_1000_pods_s"] = Measured(median(lists), lists)
    # check=False: one rank's log unreadable (a 500 from the API server for a fake node it
    # has no address of, seen once) is a figure with its error, not the run's end.
    logs = measure(_kdist(pk, ns, "logs", name, "--tail", "5"), pk, check=False)
    said = "" if logs.code == 0 else f"; exit {logs.code}: {tail(logs.err, 2)}"
    ctx.say(f"    logs x{n}: {logs.brief()}{said}")
    out["scale.logs_1000_pods_s"] = Measured(logs.wall_s, [logs.wall_s], logs.brief() + said)


def _restart(api: Any, pk: Any, pc: Any, ns: str, cache: str, tmp: Path, n: int, ctx: Ctx,
             out: dict[str, Measured]) -> None:
    """`kdist submit --wait` of an N-node job (maxRestarts 1) beside `kubectl wait` on it;
    while it runs, status, list and logs are measured; then every pod exits 137, the Job
    controller recreates them, and the new ones exit 0."""
    name, sel = "kd-restart", "kdist.dev/job-name=kd-restart"
    spec = tmp / "restart.yaml"
    spec.write_text(job_text(name, ns, nodes=n, gang="native", max_restarts=1))
    times: dict[str, float] = {}

    def drive() -> Cost:
        times["running"] = wait_running(api, ns, sel, n, timeout=900)
        _status_list_logs(pk, pc, ns, cache, name, ctx, out, n)
        first = [p.metadata.name for p in pods(api, ns, sel)]
        started = time.monotonic()
        end_pods(api, ns, first, 137)  # retryable: each index gets a new pod
        old = set(first)
        while True:  # every index's new pod runs (none of the first still does)
            running = {p.metadata.name for p in pods(api, ns, sel) if p.status.phase == "Running"}
            if len(running - old) >= n and not running & old:
                break
            if time.monotonic() - started > 900:
                raise BenchError(f"{len(running - old)} of {n} new pods Running after 900 s")
            time.sleep(2)
        times["restarted"] = time.monotonic() - started
        end_pods(api, ns, sorted(running - old), 0)
        return Cost(0, 0, 0, 0)

    kubectl_wait = shlex.join(_kubectl(pc, ns, cache, "wait", "--for=condition=complete",
                                       f"job/{name}", "--timeout=1200s"))
    kubectl_get = shlex.join(_kubectl(pc, ns, cache, "get", "job", name))
    kd, kc, _ = _together(
        lambda: measure(_kdist(pk, ns, "submit", str(spec), "--timeout", "1200"), pk,
                        timeout=1500),
        lambda: measure(["sh", "-c", f"until {kubectl_get} >/dev/null 2>&1; do sleep 1; done; "
                         f"exec {kubectl_wait}"], pc, timeout=1500),
        drive)
    warnings = [line for line in kd.err.splitlines() if line.startswith("warning:")]
    ctx.say(f"    restart x{n}: {times}\n    kdist submit --wait {kd.brief()}\n"
            f"    kubectl wait {kc.brief()}\n    kdist's warnings: {len(warnings)}:\n"
            f"{tail(kd.err, 14)}")
    out["scale.restart_warnings_1000"] = Measured(
        len(warnings), [], f"{n} pods exited 137, then 0; {tail(kd.err, 3)}")
    out["scale.restart_wait_vs_kubectl_cpu_1000"] = Measured(
        kd.cpu_s / max(kc.cpu_s, 1e-3), [], f"kdist {kd.brief()} | kubectl {kc.brief()}; "
        f"{n} Running after {times['running']:.0f} s, back after {times['restarted']:.0f} s")


def _many(api: Any, pk: Any, pc: Any, ns: str, cache: str, jobs: int, ctx: Ctx,
          out: dict[str, Measured]) -> None:
    from kubernetes import client

    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    names = [f"w{i}" for i in range(jobs)]
    for name in names:
        for obj in kube.rendered(job_text(name, ns, nodes=8, run_for="10s", gang="none")):
            if obj["kind"] == "Job":
                obj["spec"]["suspend"] = True
                batch.create_namespaced_job(ns, obj, _request_timeout=60)
            elif obj["kind"] == "Service":
                core.create_namespaced_service(ns, obj, _request_timeout=60)

    def start_all() -> Cost:
        pk.wait_for(lambda s: s.watches >= 2, 120)
        pc.wait_for(lambda s: s.watches >= 1, 120)
        for name in names:
            batch.patch_namespaced_job(name, ns, {"spec": {"suspend": False}},
                                       _request_timeout=60)
        return Cost(0, 0, 0, 0)

    pk.reset()
    pc.reset()
    kd, kc, _ = _together(
        lambda: measure(_kdist(pk, ns, "wait", "--all", "--timeout", "1200"), None),
        lambda: measure(_kubectl(pc, ns, cache, "wait", "--for=condition=complete", "job",
                                 "--all", "--timeout=1200s"), None), start_all)
    kd.stats, kc.stats = pk.snapshot(), pc.snapshot()
    ended = sum(1 for line in kd.out.splitlines() if line.endswith(" succeeded"))
    if ended != jobs:
        raise BenchError(f"kdist wait --all: {ended} of {jobs} succeeded:\n{tail(kd.out)}")
    ctx.say(f"    {jobs}x8: kdist wait --all {kd.brief()}\n          kubectl wait --all "
            f"{kc.brief()}")
    out["scale.wait_all_watches_200x8"] = Measured(kd.stats["peak_watches"], [],
                                                   f"{jobs} jobs x 8 nodes; {kd.brief()}")
    out["scale.wait_all_peak_mb_200x8"] = Measured(kd.rss_mb, [])
    out["scale.wait_all_requests_per_job_200x8"] = Measured(kd.requests / jobs, [])
    out["scale.wait_all_vs_kubectl_cpu_200x8"] = Measured(kd.cpu_s / max(kc.cpu_s, 1e-3), [],
                                                          kc.brief())


def _submits_alone(pk: Any, pc: Any, ns: str, cache: str, tmp: Path, n: int, ctx: Ctx,
                   out: dict[str, Measured]) -> None:
    """submit --wait of an N-node Indexed Job + PodGroup (20 s of run), kdist and kubectl
    alone in turn (``KDIST_BENCH_SCALEKUBE=submit``); medians of `ctx.rounds`."""
    kd_s: list[float] = []
    kc_s: list[float] = []
    kd_cost: Cost | None = None
    for r in range(ctx.rounds):
        mine, theirs = f"kd-alone-{r}", f"kc-alone-{r}"
        spec = tmp / f"{mine}.yaml"
        spec.write_text(job_text(mine, ns, nodes=n, run_for="20s", gang="native"))
        objs = _rendered_file(job_text(theirs, ns, nodes=n, run_for="20s", gang="native"),
                              tmp / f"{theirs}.yaml")

        def kdist_alone(spec: Path = spec) -> Cost:
            return measure(_kdist(pk, ns, "submit", str(spec), "--timeout", "900"), pk)

        def kubectl_alone(objs: Path = objs, theirs: str = theirs) -> Cost:
            return measure(_sh(_kubectl(pc, ns, cache, "apply", "-f", str(objs)),
                               _kubectl(pc, ns, cache, "wait", "--for=condition=complete",
                                        f"job/{theirs}", "--timeout=900s")), pc)
        first, second = (kdist_alone, kubectl_alone) if r % 2 == 0 else \
            (kubectl_alone, kdist_alone)
        a, b = first(), second()
        kd, kc = (a, b) if r % 2 == 0 else (b, a)
        kd_s.append(kd.wall_s)
        kc_s.append(kc.wall_s)
        kd_cost = kd
        ctx.say(f"    round {r + 1}, submit --wait x{n} alone: kdist {kd.brief()}\n"
                f"                                       kubectl {kc.brief()}")
    ratios = [a / b for a, b in zip(kd_s, kc_s, strict=True)]
    detail = (f"{n} nodes; kdist {', '.join(f'{x:.1f}' for x in kd_s)} s; kubectl "
              f"{', '.join(f'{x:.1f}' for x in kc_s)} s; ratios "
              f"{', '.join(f'{x:.2f}' for x in ratios)}")
    out["scale.submit_wait_alone_vs_kubectl"] = Measured(median(ratios), ratios, detail)
    out["scale.submit_wait_alone_s"] = Measured(median(kd_s), kd_s)
    if kd_cost is not None:
        out["scale.watch_watches_alone"] = Measured(kd_cost.stats["peak_watches"], [])


def _status_only(api: Any, pk: Any, pc: Any, ns: str, cache: str, tmp: Path, n: int,
                 ctx: Ctx, out: dict[str, Measured]) -> None:
    """Only status, list and logs of a running N-pod job (``KDIST_BENCH_SCALEKUBE=status``:
    minutes instead of the half hour of every part), nothing else running beside them."""
    name = "kd-status"
    spec = tmp / f"{name}.yaml"
    spec.write_text(job_text(name, ns, nodes=n, gang="native"))
    measure(_kdist(pk, ns, "submit", str(spec), "--no-wait"), pk, timeout=600)
    took = wait_running(api, ns, f"kdist.dev/job-name={name}", n, timeout=900)
    ctx.say(f"    {n} pods Running {took:.0f} s after the submit")
    _status_list_logs(pk, pc, ns, cache, name, ctx, out, n)


def run(ctx: Ctx) -> dict[str, Measured]:
    api = kube.connect()
    from bench.apiproxy import ApiProxy

    n, jobs = (NODES_QUICK, JOBS_QUICK) if ctx.quick else (NODES, JOBS)
    out: dict[str, Measured] = {}
    with fake_nodes(n), ApiProxy(kube.kubeconfig()) as pk, ApiProxy(kube.kubeconfig()) as pc, \
            tempfile.TemporaryDirectory() as tmp_s:
        tmp, cache = Path(tmp_s), str(Path(tmp_s) / "kubectl-cache")
        compile_kdist()  # kdist as installed: its .pyc written, not compiled every run
        if os.environ.get("KDIST_BENCH_SCALEKUBE") == "submit":
            with kube.namespace(api, "kdist-bench-kwok") as ns:
                measure(_kubectl(pc, ns, cache, "api-resources"), None)  # warm discovery
                _submits_alone(pk, pc, ns, cache, tmp, n, ctx, out)
            return out
        if os.environ.get("KDIST_BENCH_SCALEKUBE") == "status":
            with kube.namespace(api, "kdist-bench-kwok") as ns:
                measure(_kubectl(pc, ns, cache, "api-resources"), None)  # warm discovery
                _status_only(api, pk, pc, ns, cache, tmp, n, ctx, out)
            return out
        with kube.namespace(api, "kdist-bench-kwok") as ns:
            measure(_kubectl(pc, ns, cache, "api-resources"), None)  # warm discovery, uncounted
            kd, kc = _submits(api, pk, pc, ns, cache, tmp, n, "indexed-job", ctx)
            out["scale.submit_wait_1000_vs_kubectl"] = Measured(
                kd.wall_s / kc.wall_s, [], f"kdist {kd.brief()} | kubectl {kc.brief()}")
            out["scale.submit_wait_1000_s"] = Measured(kd.wall_s, [])
            out["scale.watch_peak_mb_1000"] = Measured(kd.rss_mb, [])
            out["scale.watch_watches_1000"] = Measured(kd.stats["peak_watches"], [])
            out["scale.watch_follows_1000"] = Measured(kd.stats["peak_follows"], [])
            out["scale.submit_requests_per_pod_1000"] = Measured(
                kd.requests / n, [], json.dumps(kd.stats["by_kind"]))
            dk, dc = _together(
                lambda: measure(_kdist(pk, ns, "delete", "kd-ind"), pk),
                lambda: measure(_kubectl(pc, ns, cache, "delete", "job", "kc-ind",
                                         "--cascade=foreground", "--wait=true"), pc))
            ctx.say(f"    delete x{n}: kdist {dk.brief()}\n              kubectl {dc.brief()}")
            out["scale.delete_1000_vs_kubectl"] = Measured(dk.wall_s / dc.wall_s, [],
                                                           f"{dk.brief()} | {dc.brief()}")
            kd, kc = _submits(api, pk, pc, ns, cache, tmp, n, "jobset", ctx)
            out["scale.submit_wait_jobset_1000_vs_kubectl"] = Measured(
                kd.wall_s / kc.wall_s, [], f"kdist {kd.brief()} | kubectl {kc.brief()}")
        with kube.namespace(api, "kdist-bench-kwok") as ns:
            _restart(api, pk, pc, ns, cache, tmp, n, ctx, out)
        with kube.namespace(api, "kdist-bench-kwok") as ns:
            _many(api, pk, pc, ns, cache, jobs, ctx, out)
    return out
