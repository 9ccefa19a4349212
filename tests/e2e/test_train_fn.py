"""`kdist.Client.train(fn)` on a real cluster, both backends: a Python function runs on
every rank of a 2-node job (shipped with its directory as ConfigMaps, no image rebuild,
no registry); rank 0's return value comes back through its log, a rank's exception comes
back as JobFailed naming that rank and the remote traceback. The pods get nothing more
than any kdist job's (Pod Security "restricted" namespace, no extra RBAC, no volume).
Afterwards `metrics` and `logs` read the job, and `delete` leaves nothing behind."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import kdist
from kdist.shared.errors import JobFailed

from .conftest_cli import IMAGE, leftovers

pytestmark = pytest.mark.timeout(600)
BACKENDS = ["indexed-job", "pytorchjob"]
FNS = Path(__file__).with_name("trainfns")
RESOURCES = {"cpu": "500m", "memory": "1Gi"}
TRAIN_TIMEOUT = 420


@pytest.fixture
def fns(monkeypatch):
    monkeypatch.syspath_prepend(str(FNS))
    import e2e_fns

    yield e2e_fns
    sys.modules.pop("e2e_fns", None)


@pytest.fixture
def client(namespace: str) -> kdist.Client:
    return kdist.Client(namespace=namespace, request_timeout=30)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_function_returns_rank_0s_value(backend, client, fns, namespace, capsys):
    name = f"fn-{backend[:3]}"
    value = client.train(fns.gather, nodes=2, args={"scale": 10}, image=IMAGE,
                         backend=backend, name=name, resources=RESOURCES,
                         timeout=TRAIN_TIMEOUT)
    assert {k: value[k] for k in ("rank", "world", "sum", "node", "cwd")} == \
        {"rank": 0, "world": 2, "sum": 30.0, "node": 0, "cwd": "/workspace"}, value
    assert "KDIST-RESULT" not in capsys.readouterr().out
    assert client.status(name).phase == "Succeeded"
    lines = list(client.logs(name))
    assert {rank for rank, _ in lines} == {0, 1}, lines
    assert any("KDIST-RESULT" in line for rank, line in lines if rank == 0)
    gone = client.delete(name)
    assert gone.namespace == namespace
    assert leftovers(namespace, name) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_exception_on_rank_1_is_job_failed_naming_it(backend, client, fns):
    name = f"fn-fail-{backend[:3]}"
    with pytest.raises(JobFailed) as failed:
        client.train(fns.fail_on, nodes=2, args=[1], image=IMAGE, backend=backend,
                     name=name, resources=RESOURCES, timeout=TRAIN_TIMEOUT)
    message = str(failed.value)
    assert message.splitlines()[0] == "rank 1 raised ValueError: bad batch on rank 1", message
    assert "in fail_on" in message, message
    client.delete(name)
