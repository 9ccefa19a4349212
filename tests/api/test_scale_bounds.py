"""A job of many nodes costs a bounded number of requests (issue 53).

`kdist status` read every rank's log, one after another (1,000 requests at 1,000 nodes);
the watch of `submit --wait` / `logs -f` followed every rank's log (1,000 connections
and threads). Now status reads at most LOG_NODES logs (the failed ranks' first) a few
at a time, and the watch follows nodes 0 to LOG_NODES - 1 unless --all-nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kdist.shared.limits import LOG_NODES
from tests.api import objects
from tests.api.fakeapi import FakeApi

pytestmark = pytest.mark.timeout(240)

NODES = 100
ROOT = Path(__file__).resolve().parents[2]
FAILED = 77  # a rank past LOG_NODES whose log says why it failed


def big_job(api: FakeApi, outcome: str | None = None) -> dict[str, Any]:
    job = api.add(objects.job("big", nodes=NODES, outcome=outcome))[0]
    for rank in range(NODES):
        code = (1 if rank == FAILED else 0) if outcome else None
        api.add(objects.pod(job, rank, exit_code=code))
        api.set_log(f"big-{rank}-abcde", objects.step_log(rank, world=NODES))
    return job


def log_reads(out: Any) -> list[str]:
    return [r.path.rsplit("/", 2)[-2] for r in out.requests if r.path.endswith("/log")]


def test_status_reads_a_bounded_number_of_logs_the_failed_first(api, kdist):
    big_job(api, outcome="Failed")
    out = kdist("status", "big", "-o", "json")
    assert out.code == 0, out.describe()
    read = log_reads(out)
    assert len(read) == LOG_NODES, read
    assert f"big-{FAILED}-abcde" in read, read
    state = json.loads(out.stdout)
    steps = {r["rank"]: r["step"] for r in state["ranks"]}
    assert len(steps) == NODES and steps[0] == 6 and steps[FAILED] == 6, steps
    assert steps[NODES - 1] is None, steps  # not read: unknown, not made up
    assert f"from {LOG_NODES} of {NODES} ranks' logs" in out.stderr, out.describe()


def test_status_table_of_a_big_job(api, kdist):
    big_job(api)
    out = kdist("status", "big")
    assert out.code == 0, out.describe()
    assert len(log_reads(out)) == LOG_NODES, out.describe()
    assert f"big-{NODES - 1}-abcde" in out.stdout, out.describe()  # every rank's row


@pytest.mark.parametrize("all_nodes", [False, True], ids=["default", "all-nodes"])
def test_the_watch_follows_a_bounded_number_of_logs(api, kdist, all_nodes):
    big_job(api, outcome="Complete")
    out = kdist("logs", "-f", "big", *(["--all-nodes"] if all_nodes else []))
    assert out.code == 0, out.describe()
    followed = set(log_reads(out))
    want = NODES if all_nodes else LOG_NODES
    assert followed == {f"big-{r}-abcde" for r in range(want)}, sorted(followed)
    if not all_nodes:
        assert f"following nodes 0-{LOG_NODES - 1} of {NODES}" in out.stderr, out.describe()
        assert "[rank 0] " in out.stdout and f"[rank {NODES - 1}] " not in out.stdout


def test_logs_f_of_one_node_past_the_bound(api, kdist):
    big_job(api, outcome="Complete")
    out = kdist("logs", "-f", "big", "--node", str(NODES - 1))
    assert out.code == 0, out.describe()
    assert set(log_reads(out)) == {f"big-{NODES - 1}-abcde"}, out.describe()
    assert f"[rank {NODES - 1}] " in out.stdout, out.describe()


@pytest.mark.parametrize("verb", [["status", "big"], ["list"], ["logs", "big"]])
def test_cluster_verbs_do_not_load_the_spec_model(api, kubeconfig, verb):
    """The verbs that read a job never validate a spec: pydantic and the model (0.45 s of
    a `kdist status` here) load only where a job.yaml is read."""
    big_job(api)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "kdist", "--kubeconfig",
                          str(kubeconfig), *verb], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "kdist.kube.client" in imported  # importtime did watch the verb
    loaded = sorted(m for m in imported if m.startswith(("pydantic", "kdist.spec.model",
                                                         "kdist.spec.load", "jinja2")))
    assert loaded == [], f"kdist {' '.join(verb)} imported {loaded}"
