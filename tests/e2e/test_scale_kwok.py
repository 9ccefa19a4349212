"""kdist against 100 fake nodes (issue 53): what a job of many nodes costs the API server.

kwok (tests/cluster/kwok.sh) attaches 100 fake nodes to the test cluster for this module
and removes them after; the jobs' pods land there only (taint + selector) and kwok runs
them: Running at once, then Succeeded or Failed when the test annotates them (or after
their `run-for` label). kdist runs through a counting proxy (bench/apiproxy.py: it
forwards every request to the real API server and counts them, and the watches and
followed logs held at once).

What failed before the fixes: `status` read all 100 logs; `submit --wait` followed all 100
logs (100 connections); 100 pods failing together were 100 warning lines.
`exclusive`: 100 fake nodes change the cluster other tests see.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness import Skip
from kdist.shared.limits import LOG_NODES

pytestmark = [pytest.mark.exclusive, pytest.mark.timeout(1500)]

NODES = 100
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fake_nodes(kube) -> Iterator[None]:
    from bench import kwok

    try:
        with kwok.fake_nodes(NODES):
            yield
    except Skip as e:
        pytest.skip(str(e))


@pytest.fixture(name="proxy")
def proxy_fixture() -> Iterator[object]:
    from bench.apiproxy import ApiProxy

    with ApiProxy(os.environ["KUBECONFIG"]) as p:
        yield p


def _kdist(proxy, namespace: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "kdist", "--kubeconfig", str(proxy.kubeconfig), "-n",
            namespace, *args]


def _spec(tmp_path: Path, name: str, namespace: str, **kwargs) -> Path:
    from bench.kwok import job_text

    path = tmp_path / f"{name}.yaml"
    path.write_text(job_text(name, namespace, nodes=NODES, **kwargs))
    return path


def _running(kube, namespace: str, name: str) -> list[str]:
    from bench.kwok import pods, wait_running

    selector = f"kdist.dev/job-name={name}"
    wait_running(kube.api, namespace, selector, NODES, timeout=600)
    return [p.metadata.name for p in pods(kube.api, namespace, selector)]


def test_status_of_a_100_pod_job_reads_a_bounded_number_of_logs(
        fake_nodes, kube, namespace, proxy, tmp_path):
    from bench.kwok import measure

    spec = _spec(tmp_path, "wide", namespace)
    measure(_kdist(proxy, namespace, "submit", str(spec), "--no-wait"), proxy, timeout=300)
    _running(kube, namespace, "wide")
    out = measure(_kdist(proxy, namespace, "status", "wide", "-o", "json"), proxy,
                  timeout=300)
    logs = out.stats["by_kind"].get("log", 0)
    assert 0 < logs <= LOG_NODES, out.brief()
    assert out.requests <= LOG_NODES + 12, out.brief()  # the job, its pods, discovery, logs
    ranks = json.loads(out.out)["ranks"]
    assert len(ranks) == NODES and all(r["phase"] == "Running" for r in ranks), out.out[-2000:]
    assert ranks[0]["step"] == 20, ranks[0]  # kwok's log: kdist's step lines


def test_submit_wait_follows_a_bounded_number_of_logs(fake_nodes, namespace, proxy,
                                                      tmp_path):
    from bench.kwok import measure

    spec = _spec(tmp_path, "ends", namespace, run_for="15s")
    out = measure(_kdist(proxy, namespace, "submit", str(spec), "--timeout", "600"), proxy,
                  timeout=900)
    assert "job ends succeeded" in out.out, out.err[-3000:]
    # the job and its pods; the PodGroup is read, not watched (kdist.kube.watch.poller)
    assert out.stats["peak_watches"] <= 2, out.brief()
    assert out.stats["peak_follows"] <= LOG_NODES, out.brief()
    assert f"following nodes 0-{LOG_NODES - 1} of {NODES}" in out.err, out.err[-3000:]


def test_a_gang_failing_together_is_a_few_lines(fake_nodes, kube, namespace, proxy, tmp_path):
    from bench.kwok import end_pods, measure

    spec = _spec(tmp_path, "fails", namespace)
    result = {}

    def submit() -> None:
        result["out"] = measure(_kdist(proxy, namespace, "submit", str(spec), "--timeout",
                                       "900"), proxy, timeout=1200, check=False)

    watcher = threading.Thread(target=submit)
    watcher.start()
    names = _running(kube, namespace, "fails")
    end_pods(kube.api, namespace, names, 1)  # exit 1: the podFailurePolicy fails the job
    watcher.join(1200)
    out = result["out"]
    assert out.code == 1 and "job fails failed" in out.err, out.err[-3000:]
    warnings = [line for line in out.err.splitlines() if line.startswith("warning:")]
    exits = [line for line in warnings if "exited with code 1" in line]
    assert 1 <= len(exits) <= 8, "\n".join(warnings)
    assert len(warnings) <= 12, "\n".join(warnings)
    assert out.stats["peak_follows"] <= LOG_NODES, out.brief()
