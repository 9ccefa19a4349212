"""docs/python-api.md's first block runs as it is, against the fake API server: a job that
completes while the block follows its logs."""

from __future__ import annotations

import contextlib
import io

import pytest

from tests.api import objects
from tests.readme_blocks import python_block

pytestmark = pytest.mark.timeout(60)
NS = "team-a"


def test_the_readme_python_api_block_runs(api, kubeconfig, tmp_path, monkeypatch):
    code = python_block("client = kdist.Client(namespace=\"team-a\")")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    objects.job_yaml(tmp_path / "job.yaml")
    api.store.namespaces.add(NS)

    def run_and_finish(job):  # the Job controller and the kubelet, at once
        for rank in (0, 1):
            pod = api.add(objects.pod(job, rank, exit_code=0))[0]
            api.set_log(pod["metadata"]["name"], objects.step_log(rank), namespace=NS)
        api.store.update(dict(job, status={"conditions": [
            {"type": "Complete", "status": "True"}], "succeeded": 2}))

    api.after_create["jobs"] = run_and_finish
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/python-api.md", "exec"), {"__name__": "readme"})
    printed = out.getvalue().splitlines()
    assert "0 rank 0 starting" in printed and "1 rank 1 starting" in printed, printed
    assert printed[-2:] == ["Succeeded {0: 0.1667, 1: 0.1667}", "['demo']"], printed
    assert api.store.alive("jobs", NS) == [], "the block's delete left the job"
