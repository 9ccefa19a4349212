"""`Client.train` against the fake API: rank 0's value comes back from its log as JSON,
and a log (or an API server) that forges the old pickled frame runs nothing here."""

from __future__ import annotations

import base64
import hashlib
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

import kdist
from kdist.shared import frames
from kdist.shared.errors import JobFailed
from tests.api import objects
from tests.api.fakeapi import FakeApi

pytestmark = pytest.mark.timeout(60)


class Mkdir:
    """A pickle that runs os.mkdir(path) when loaded."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.path,))


def pickled_frame(value: object) -> str:
    """A line in the old frame format (kdist before JSON), as a hostile server would send."""
    payload = pickle.dumps(value)
    digest = hashlib.sha256(payload).hexdigest()[:16]
    return f"KDIST-RESULT {digest} 1/1 {base64.b64encode(payload).decode()}"


def finish_with(api: FakeApi, rank0_log: str) -> None:
    """Play the Job controller for the job train() creates: both ranks end with code 0,
    rank 0's log is `rank0_log`."""

    def finish(job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        api.set_log(f"{name}-0-abcde", rank0_log)
        api.set_log(f"{name}-1-abcde", "rank 1 done\n")
        api.add(objects.pod(job, 0, exit_code=0), objects.pod(job, 1, exit_code=0))
        api.store.update(dict(job, status={"conditions": [{"type": "Complete",
                                                           "status": "True"}]}))

    api.after_create["jobs"] = finish


def run_fit(kubeconfig: Path) -> Any:
    def fit() -> dict:  # travels as source; what it returns is the log's to say
        return {}

    return kdist.Client(kubeconfig=kubeconfig).train(fit, nodes=2, name="demo", logs=False,
                                                     timeout=30, image="kdist-train:dev-cpu")


def test_the_value_comes_back_from_rank_0s_log_as_json(api, kubeconfig):
    value = {"loss": [0.5, 0.25], "steps": 2, "tag": None, "ok": True}
    finish_with(api, "step 1\n" + "\n".join(frames.result_lines(value)) + "\n")
    assert run_fit(kubeconfig) == value


def test_a_forged_pickled_frame_in_the_log_runs_nothing_here(api, kubeconfig, tmp_path):
    target = tmp_path / "made-by-the-api-server"
    finish_with(api, "step 1\n" + pickled_frame(Mkdir(target)) + "\n")
    with pytest.raises(JobFailed) as refused:
        run_fit(kubeconfig)
    assert not target.exists(), "a line of the pod's log ran code on the client"
    message = str(refused.value)
    assert "\n" not in message and "which kdist never loads" in message, message
