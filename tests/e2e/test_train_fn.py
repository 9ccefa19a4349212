"""The notebook loop on the real cluster, through `kdist.Client` only.

`Client.train(fn)` ships the function's directory (tests/dist/trainfns: the
function's module and the helper it imports) and runs the function on every
rank of a 2-pod job, on both backends: rank 0's return value comes back, a
rank's exception comes back as `JobFailed` naming that rank and the line that
raised. A DDP job submitted with the Client is then read back as a stream of
`(rank, line)`, as step series per rank, and as a picture.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import pytest
import yaml

import kdist
from kdist import backends
from kdist.shared.errors import JobFailed

from .conftest_cli import IMAGE, job_spec

FNS = Path(__file__).resolve().parents[1] / "dist" / "trainfns"
BACKENDS = list(backends.NAMES)
# Two pods of 500m fit beside another test's job (make e2e runs two at a time).
RESOURCES = {"cpu": "500m", "memory": "1Gi"}
pytestmark = pytest.mark.timeout(420)


@pytest.fixture
def client(namespace: str) -> kdist.Client:
    return kdist.Client(kubeconfig=os.environ["KUBECONFIG"], namespace=namespace,
                        request_timeout=30)


@pytest.fixture
def remote(monkeypatch):
    monkeypatch.syspath_prepend(str(FNS))
    import remote as module  # as a notebook imports the file beside it

    yield module
    sys.modules.pop("remote", None)
    sys.modules.pop("helper", None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_function_runs_on_two_pods_and_rank_0s_value_comes_back(client, remote, backend):
    name = f"fn-{backend}"
    value = client.train(remote.world_sum, nodes=2, args={"scale": 10, "tag": backend},
                         backend=backend, image=IMAGE, resources=RESOURCES, name=name,
                         timeout=300, logs=False)
    # Rank 0's own view: 2 ranks on 2 pods, an all_reduce over both, and the helper
    # module imported from the shipped directory (it is not in the image).
    assert value == {"rank": 0, "world": 2, "sum": 30.0, "node": 0, "tag": backend,
                     "helper": "helper from the shipped workdir"}
    state = client.status(name)
    assert state.phase == "Succeeded", state


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_exception_on_rank_1_comes_back_as_job_failed_naming_it(client, remote, backend):
    with pytest.raises(JobFailed) as failed:
        client.train(remote.fail_on, nodes=2, args=[1], backend=backend, image=IMAGE,
                     resources=RESOURCES, name=f"boom-{backend}", timeout=300, logs=False)
    message = str(failed.value)
    raising = next(i for i, line in enumerate(Path(remote.__file__).read_text().splitlines(), 1)
                   if 'raise ValueError(f"bad batch' in line)
    assert message.splitlines()[0] == \
        f"rank 1 raised ValueError: bad batch on rank 1 (remote.py:{raising})", message
    assert 'raise ValueError(f"bad batch' in message, message


def test_a_jobs_lines_steps_and_picture_read_back_through_the_client(client, tmp_path):
    name = "metrics"
    spec = job_spec(name, args=["--max-steps", "8", "--batch-size", "16", "--log-every", "2",
                                "--dataset-size", "2048"], resources=RESOURCES)
    job = kdist.parse_job(yaml.safe_dump(spec), source=f"{name}.yaml")
    client.submit(job, wait=True, timeout=300)

    seen: dict[int, list[str]] = {0: [], 1: []}
    for rank, line in client.logs(name, follow=True):
        seen[rank].append(line)
    for rank in (0, 1):
        assert any('"event": "done"' in line for line in seen[rank]), seen[rank]

    series = client.metrics(name)
    assert sorted(series) == [0, 1], series
    for rank, steps in series.items():
        assert [s.step for s in steps] == [2, 4, 6, 8], steps
        assert all(s.rank == rank and s.restart == 0 and s.loss is not None for s in steps)

    picture = tmp_path / "metrics.png"
    assert client.plot(name, picture) == 8  # 4 steps x 2 ranks
    head = picture.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", head
    width, height = struct.unpack(">II", head[16:24])
    assert width >= 400 and height >= 300, (width, height)
    assert client.delete(name).objects, "delete found nothing to delete"
