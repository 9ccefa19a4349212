"""The Kubeflow SDK (kubeflow 0.5, `TrainerClient`) and kdist read each other's TrainJobs
(issue 57 slice 2). The SDK reads a kdist-made TrainJob as kdist does: its name, status,
node count, runtime, steps and their pods (`kdist status -o json`), node 0's log (the step
lines of `kdist logs NAME --rank 0`), and waits for it to complete; kdist reads a TrainJob the
SDK's train() made from a stock-shaped ClusterTrainingRuntime, saying what it cannot know as
unknown. The SDK runs in a venv of its own (`tests/e2e/kubeflow_sdk.py`): skipped only
where that is absent, outside `make e2e`."""

from __future__ import annotations

import json
import subprocess

import pytest

from . import kubeflow_sdk as sdk
from .conftest import Kube, require_backend
from .conftest_cli import IMAGE, job_file_fixture, kdist_fixture, kubectl  # noqa: F401
from .test_trainjob import DDP_ARGS, TIMEOUT


@pytest.fixture(autouse=True)
def _trainer_and_sdk(kube: Kube) -> None:
    require_backend(kube, "trainjob")
    sdk.python()  # skip where the SDK's venv is absent


def steps_of(lines: list[str]) -> list[dict]:
    """The workload's step records among log lines, in order."""
    out = []
    for line in lines:
        text = line[line.index("{"):] if "{" in line else ""
        try:
            record = json.loads(text)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == "step":
            out.append(record)
    return out


def test_the_sdk_reads_a_kdist_trainjob(namespace, kdist, job_file):
    sub = kdist("submit", job_file("tj", backend="trainjob", args=DDP_ARGS),
                "--timeout", TIMEOUT)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    ours = json.loads(kdist("status", "tj", "-o", "json").stdout)
    assert ours["phase"] == "Succeeded", ours

    waited = sdk.ask("wait_for_job_status", namespace, name="tj", status=["Complete"],
                     timeout=120)
    got = sdk.ask("get_job", namespace, name="tj")
    assert waited == got
    assert sdk.ask("list_jobs", namespace) == [got]
    assert (got["name"], got["status"], got["num_nodes"], got["runtime"]) == (
        "tj", "Complete", ours["nodes"], "tj"), got
    pods = {f"node-{r['rank']}": r["pod"] for r in ours["ranks"]}
    assert {s["name"]: s["pod"] for s in got["steps"]} == pods, (got, ours)
    assert {s["status"] for s in got["steps"]} == {"Succeeded"}, got

    theirs = steps_of(sdk.ask("get_job_logs", namespace, name="tj"))
    logs = kdist("logs", "tj", "--rank", "0")
    assert logs.returncode == 0, logs.stderr
    mine = steps_of([line.removeprefix("[rank 0] ") for line in logs.stdout.splitlines()])
    assert theirs and theirs == mine, (theirs, mine)
    assert theirs[-1]["step"] == 20 and {r["rank"] for r in theirs} == {0}


@pytest.fixture
def stock(namespace):
    """A stock-shaped ClusterTrainingRuntime (cluster-scoped: deleted after the test) whose
    node prints one line that is no kdist record."""
    name = f"stock-{namespace}"
    command = ["python3", "-c", "import os; print('hello from node', "
               "os.environ['JOB_COMPLETION_INDEX'], flush=True)"]
    kubectl("apply", "-f", "-", stdin=json.dumps(sdk.stock_runtime(name, IMAGE, command)))
    yield name
    subprocess.run(["kubectl", "delete", "clustertrainingruntimes.trainer.kubeflow.org", name,
                    "--ignore-not-found", "--wait=false"], capture_output=True, timeout=60)


def test_kdist_reads_a_trainjob_the_sdk_made(namespace, kdist, stock):
    name = sdk.ask("train", namespace, runtime=stock, image=IMAGE, nodes=2)
    done = sdk.ask("wait_for_job_status", namespace, name=name, status=["Complete"],
                   timeout=300)
    assert done["status"] == "Complete", done

    out = kdist("status", name, "-o", "json")
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert (status["kind"], status["phase"], status["nodes"]) == ("TrainJob", "Succeeded", 2)
    assert [r["rank"] for r in status["ranks"]] == [0, 1], status
    assert {r["pod"] for r in status["ranks"]} == {s["pod"] for s in done["steps"]}
    # No kdist records, no kdist facts: unknown, not made up.
    assert {r["step"] for r in status["ranks"]} == {None}, status
    assert status["maxSteps"] is None, status
    table = kdist("status", name)
    assert table.returncode == 0 and "not of the shape kdist writes" not in table.stdout, \
        table.stdout

    logs = kdist("logs", name, "--rank", "1")
    assert logs.returncode == 0, logs.stderr
    assert "[rank 1] hello from node 1" in logs.stdout, logs.stdout
