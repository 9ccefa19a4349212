""""rank" is torch's RANK; a pod is a node. With procsPerNode > 1 a pod's log holds several
ranks' lines, so `logs`, `status` and the failure line say node, and --rank is refused."""

from __future__ import annotations

import json

import pytest

from tests.api import objects
from tests.api.checks import error_line

pytestmark = pytest.mark.timeout(60)


def two_per_node(api, name: str = "wide", **kwargs) -> dict:
    job = api.add(objects.job(name, procs_per_node=2, **kwargs))[0]
    for node in (0, 1):
        code = kwargs.get("outcome") and (3 if node == 1 else 0)
        api.add(objects.pod(job, node, exit_code=code if kwargs.get("outcome") else None))
        api.set_log(f"{name}-{node}-abcde", objects.step_log(node, world=4))
    return job


def test_logs_of_a_multi_rank_pod_say_node(api, kdist):
    two_per_node(api)
    out = kdist("logs", "wide")
    assert out.code == 0, out.describe()
    lines = out.stdout.splitlines()
    assert lines[0] == "[node 0] rank 0 starting" and "[node 1] rank 1 starting" in lines
    assert not any(line.startswith("[rank ") for line in lines), out.stdout


def test_logs_node_picks_one_pod(api, kdist):
    two_per_node(api)
    out = kdist("logs", "wide", "--node", "1", "--tail", "1")
    assert out.code == 0, out.describe()
    assert out.stdout.startswith("[node 1] ") and len(out.stdout.splitlines()) == 1
    assert [r.path for r in out.requests if r.path.endswith("/log")] == \
        ["/api/v1/namespaces/default/pods/wide-1-abcde/log"]


@pytest.mark.parametrize("follow", [[], ["-f"]])
def test_logs_rank_is_refused_where_a_pod_runs_several(api, kdist, follow):
    two_per_node(api)
    out = kdist("logs", "wide", "--rank", "1", *follow)
    error_line(out, 2, "--rank 1", "2 ranks per node", "--node 0 (ranks 0-1)")
    assert not any(r.query.get("follow") == "true" for r in out.requests), out.describe()
    out = kdist("logs", "wide", "--rank", "3", *follow)  # past the pods' count
    error_line(out, 2, "--rank 3", "--node")


def test_logs_rank_where_a_pod_runs_one_is_that_rank(api, kdist):
    job = api.add(objects.job("narrow"))[0]
    api.add(objects.pod(job, 0), objects.pod(job, 1))
    api.set_log("narrow-1-abcde", objects.step_log(1))
    out = kdist("logs", "narrow", "--rank", "1")
    assert out.code == 0 and out.stdout.startswith("[rank 1] "), out.describe()


def test_status_of_a_multi_rank_job_lists_nodes_and_their_ranks(api, kdist):
    two_per_node(api)
    out = kdist("status", "wide")
    assert out.code == 0, out.describe()
    header, *rows = [line.split() for line in out.stdout.splitlines()[1:] if line.strip()]
    assert header[:3] == ["NODE", "RANKS", "POD"] and header[-1] == "HOST", out.stdout
    assert [row[:2] for row in rows] == [["0", "0-1"], ["1", "2-3"]], out.stdout
    assert json.loads(kdist("status", "wide", "-o", "json").stdout)["procsPerNode"] == 2


def test_a_failed_multi_rank_job_names_the_node(api, kdist):
    two_per_node(api, "broke", outcome="Failed")
    out = kdist("status", "broke")
    assert "node 1 (pod broke-1-abcde) exited with code 3" in out.stdout, out.describe()
    assert "rank 1 (pod" not in out.stdout, out.describe()
