"""Watching at scale: N concurrent jobs watched by one kdist process, vs `kubectl wait` per job.

Per variant, in a fresh namespace: N one-pod kdist Jobs (rendered by kdist,
then made cheap: the container runs `true` with 10m CPU, and the Job is
created suspended); the watchers are started and given time to attach (until
the proxy sees their watches, bounded); then every Job is unsuspended at once
and the watchers run until each has seen its job end. Everything the watchers
send goes through `bench.apiproxy` on 127.0.0.1, which counts requests and the
long-running ones held at once. Job creation and unsuspension go around it.

- kdist: one `kdist wait NAME...` process for all N jobs (kdist.kube.watch.jobswatch:
  one watch on Jobs and one on Pods, whatever N, no log streams).
- kubectl: N processes `kubectl wait --for=condition=complete job/NAME`, with a
  discovery cache warmed once before counting (as a user's would be).

Request counts do not depend on timing the way throughput does: one run of
each (not interleaved medians); the wall time is reported for context only.
"""

from __future__ import annotations

import copy
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import kube
from bench.harness import (
    PYTHON,
    BenchError,
    Ctx,
    Measured,
    Spec,
    clean_env,
    failure,
    kill_session,
    run_cmd,
    tail,
)

JOBS = 50
JOBS_LARGE = 200
KDIST = "one `kdist wait NAME...` process for all jobs (one watcher: kdist.kube.watch.jobswatch)"
KUBECTL = "one `kubectl wait --for=condition=complete job/NAME` process per job"

FIGURES = [
    Spec("watch.kdist_watches_held", f"{JOBS} jobs, kdist wait: watches held at once",
         "watches", KDIST, "(goal: one watch on jobs + one on pods)", "<= 2", 2,
         higher_is_better=False),
    Spec("watch.kdist_watches_held_200", f"{JOBS_LARGE} jobs, kdist wait: watches held at once",
         "watches", KDIST, "(goal: the same 2 at any number of jobs)", "<= 2", 2,
         higher_is_better=False),
    Spec("watch.kdist_requests_per_job_200", f"API requests per job, kdist, {JOBS_LARGE} jobs",
         "requests", KDIST, "(absolute)"),
    Spec("watch.kdist_streams_held", "... and watches + followed logs held at once", "streams",
         KDIST, "(absolute)"),
    Spec("watch.kdist_requests_per_job", "API requests per job, kdist", "requests", KDIST,
         "(absolute)"),
    Spec("watch.kubectl_watches_held", f"{JOBS} jobs, kubectl wait: watches held at once",
         "watches", KUBECTL, "(absolute)"),
    Spec("watch.kubectl_requests_per_job", "API requests per job, kubectl wait", "requests",
         KUBECTL, "(absolute)"),
    Spec("watch.kdist_vs_kubectl_requests", "API requests per job, kdist / kubectl wait", "x",
         KDIST, KUBECTL),
]


def _job(name: str, ns: str) -> dict[str, Any]:
    """kdist's rendered Job for a 1-node job, suspended, its container made to exit at once."""
    text = kube.job_yaml(name, ns, nodes=1, args=["--max-steps", "1"], cpu="10m",
                         memory="64Mi")
    job = copy.deepcopy(next(o for o in kube.rendered(text) if o["kind"] == "Job"))
    job["spec"]["suspend"] = True
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["command"], container["args"] = ["true"], []
    return job


def _create(api: Any, ns: str, names: list[str]) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(api)
    for name in names:
        batch.create_namespaced_job(ns, _job(name, ns), _request_timeout=kube.REQUEST_TIMEOUT)


def _unsuspend(api: Any, ns: str, names: list[str]) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(api)
    for name in names:
        batch.patch_namespaced_job(name, ns, {"spec": {"suspend": False}},
                                   _request_timeout=kube.REQUEST_TIMEOUT)


def _measure(api: Any, proxy: Any, ns: str, names: list[str], watchers: list[list[str]],
             expect_watches: int, ctx: Ctx) -> tuple[dict, float, list[str]]:
    """Start `watchers`, wait for their watches, unsuspend, wait for them; (stats, s, outputs)."""
    _create(api, ns, names)
    proxy.reset()
    # stdout alone is counted ("succeeded" lines); stderr only explains a failure.
    procs = [subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
             for cmd in watchers]
    try:
        attached = proxy.wait_for(lambda s: s.watches >= expect_watches, 120)
        state = "attached" if attached else "NOT all attached after 120 s"
        ctx.say(f"    {len(procs)} watcher process(es) {state}: "
                f"{proxy.snapshot()['watches']} watches")
        started = time.monotonic()
        _unsuspend(api, ns, names)
        outputs = []
        deadline = started + 600
        for p in procs:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
            outputs.append(out)
            if p.returncode != 0:
                raise failure(p.args, f"exited {p.returncode}", out, err)
        seconds = time.monotonic() - started
    finally:
        for p in procs:
            if p.poll() is None:
                kill_session(p)
    return proxy.snapshot(), seconds, outputs


def run(ctx: Ctx) -> dict[str, Measured]:
    api = kube.connect()
    from bench.apiproxy import ApiProxy

    n = 20 if ctx.quick else JOBS
    out: dict[str, Measured] = {}
    with ApiProxy(kube.kubeconfig()) as proxy, tempfile.TemporaryDirectory() as tmp:
        kc = str(proxy.kubeconfig)
        with kube.namespace(api, "kdist-bench-watch") as ns:
            names = [f"kw-{i}" for i in range(n)]
            ctx.say(f"    kdist: {n} jobs in namespace {ns}")
            stats, secs, outs = _measure(
                api, proxy, ns, names,
                [[PYTHON, "-m", "kdist", "--kubeconfig", kc, "-n", ns, "wait", *names]], 2, ctx)
            succeeded = sum(1 for line in outs[0].splitlines() if line.endswith(" succeeded"))
            if succeeded != n:
                raise BenchError(f"kdist wait: {succeeded} of {n} succeeded:\n{tail(outs[0])}")
            ctx.say(f"    kdist: {json.dumps(stats)} in {secs:.1f} s")
            kd = stats
            note = f"{n} jobs; {secs:.0f} s from unsuspend to all watched; {stats['by_kind']}"
            out["watch.kdist_watches_held"] = Measured(stats["peak_watches"], [], note)
            out["watch.kdist_streams_held"] = Measured(stats["peak_long"], [],
                                                       f"{stats['peak_follows']} logs at most")
            out["watch.kdist_requests_per_job"] = Measured(stats["requests"] / n, [])
        if not ctx.quick:
            with kube.namespace(api, "kdist-bench-watch") as ns:
                names = [f"kw-{i}" for i in range(JOBS_LARGE)]
                ctx.say(f"    kdist: {JOBS_LARGE} jobs in namespace {ns}")
                big, secs, outs = _measure(
                    api, proxy, ns, names,
                    [[PYTHON, "-m", "kdist", "--kubeconfig", kc, "-n", ns, "wait", *names]],
                    2, ctx)
                ctx.say(f"    kdist: {json.dumps(big)} in {secs:.1f} s")
                note = f"{JOBS_LARGE} jobs; {secs:.0f} s from unsuspend to all watched"
                out["watch.kdist_watches_held_200"] = Measured(big["peak_watches"], [], note)
                out["watch.kdist_requests_per_job_200"] = Measured(
                    big["requests"] / JOBS_LARGE, [])
        with kube.namespace(api, "kdist-bench-watch") as ns:
            names = [f"kw-{i}" for i in range(n)]
            cache = str(Path(tmp) / "kubectl-cache")
            base = ["kubectl", "--kubeconfig", kc, "--cache-dir", cache, "-n", ns]
            run_cmd([*base, "api-resources"], timeout=60)  # warm discovery, uncounted
            ctx.say(f"    kubectl: {n} jobs in namespace {ns}")
            stats, secs, _ = _measure(
                api, proxy, ns, names,
                [[*base, "wait", "--for=condition=complete", f"job/{name}", "--timeout=600s"]
                 for name in names], n, ctx)
            ctx.say(f"    kubectl: {json.dumps(stats)} in {secs:.1f} s")
            note = f"{n} jobs; {secs:.0f} s from unsuspend to all watched; {stats['by_kind']}"
            out["watch.kubectl_watches_held"] = Measured(stats["peak_watches"], [], note)
            out["watch.kubectl_requests_per_job"] = Measured(stats["requests"] / n, [])
            out["watch.kdist_vs_kubectl_requests"] = Measured(
                kd["requests"] / max(1, stats["requests"]), [])
    return out
