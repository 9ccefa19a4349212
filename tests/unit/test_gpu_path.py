"""The GPU path's defects (issue 17 section 4), each pinned down without a GPU."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from click.testing import CliRunner

from bench.gpu import BF16_PEAK_TFLOPS, _peak
from kdist.cli import main
from kdist.local.gpus import _gpu_env, gpu_shares, visible_gpus
from kdist.rendering.contract import pod_env
from kdist.runtime import launch
from kdist.runtime.launch import resolve_env
from kdist.shared.errors import UsageError
from kdist.spec import validate_job
from kdist.workloads import common
from tests.unit.helpers import spec_with, write_spec


def never() -> int:
    raise AssertionError("the launcher counted GPUs although the pod said how many it has")


# --- procsPerNode auto counts requested GPUs, not the runtime's ------------------------------


BASE_ENV = {"KDIST_NNODES": "1", "KDIST_NODE_RANK": "0", "KDIST_NPROC_PER_NODE": "auto",
            "KDIST_DIST_BACKEND": "gloo"}


def test_auto_on_a_cpu_pod_starts_one_worker_whatever_the_runtime_exposes():
    plan = resolve_env({**BASE_ENV, "KDIST_GPUS": "0"}, gpu_count=never)
    assert plan.nproc_per_node == 1
    auto_backend = resolve_env({**BASE_ENV, "KDIST_GPUS": "0", "KDIST_DIST_BACKEND": "auto"},
                               gpu_count=never)
    assert auto_backend.backend == "gloo"


def test_auto_on_a_gpu_pod_starts_one_worker_per_requested_gpu():
    assert resolve_env({**BASE_ENV, "KDIST_GPUS": "4"}, gpu_count=never).nproc_per_node == 4
    # Without the pod's count (a hand-started launcher) the visible GPUs decide, as before.
    assert resolve_env(BASE_ENV, gpu_count=lambda: 8).nproc_per_node == 8
    with pytest.raises(launch.LaunchError, match="KDIST_GPUS"):
        resolve_env({**BASE_ENV, "KDIST_GPUS": "many"}, gpu_count=never)


# --- the "no GPU" message --------------------------------------------------------------------


def test_driver_too_old_is_said_as_such(monkeypatch):
    def lazy_init():
        raise RuntimeError("The NVIDIA driver on your system is too old (found version 12040).")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "_lazy_init", lazy_init)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    problem = common.gpu_problem(0)
    assert "driver on your system is too old (found version 12040)" in problem
    assert "built for CUDA 13.0" in problem and "supports CUDA 13.x" in problem
    assert "NVIDIA_VISIBLE_DEVICES=all" in problem
    assert "no GPU is visible" not in problem


def test_cpu_only_torch_and_missing_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "CPU-only build" in common.gpu_problem(0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert common.gpu_problem(1) is None
    assert "local rank 2 has no GPU: torch sees 2" in common.gpu_problem(2)


def test_worker_exits_with_the_reason(monkeypatch):
    monkeypatch.setattr(common, "gpu_problem", lambda rank: "torch cannot use a GPU: because")
    monkeypatch.setenv("KDIST_DIST_BACKEND", "nccl")
    with pytest.raises(SystemExit, match="KDIST_DIST_BACKEND=nccl but torch cannot use a GPU"):
        common.init_distributed()


# --- NCCL groups serve CPU tensors too ---------------------------------------------------------


def test_nccl_group_also_has_gloo_for_cpu_tensors(monkeypatch):
    calls = []
    monkeypatch.setattr(common, "gpu_problem", lambda rank: None)
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: None)
    monkeypatch.setattr(common.dist, "init_process_group",
                        lambda backend, **kw: calls.append((backend, kw)))
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # init_distributed chains a hook
    for var in ("MASTER_ADDR", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KDIST_DIST_BACKEND", "nccl")
    d = common.init_distributed()
    ((backend, kw),) = calls
    assert backend == "cpu:gloo,cuda:nccl"
    assert kw["device_id"] == torch.device("cuda", 0)
    assert (d.backend, d.device) == ("nccl", torch.device("cuda", 0))
    assert common.pg_backend("gloo") == "gloo"


# --- kdist run --local gives each node its own GPUs -----------------------------------------


def test_gpu_shares():
    eight = [str(i) for i in range(8)]
    assert gpu_shares(eight, 2, 4, "nccl") == ["0,1,2,3", "4,5,6,7"]
    assert gpu_shares(eight, 3, 2, "nccl") == ["0,1", "2,3", "4,5"]
    assert gpu_shares(["GPU-a", "GPU-b"], 2, 1, "nccl") == ["GPU-a", "GPU-b"]
    with pytest.raises(UsageError, match="2 node\\(s\\) x 4 GPU\\(s\\) need 8 GPUs, this "
                                         "machine has 1"):
        gpu_shares(["0"], 2, 4, "nccl")
    assert gpu_shares(["0"], 2, 4, "gloo") is None  # gloo runs, unpinned


def test_visible_gpus():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3,-1,4"}) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({}, count=lambda: 3) == ["0", "1", "2"]


def test_local_nodes_get_disjoint_gpus_and_the_pods_env(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    job = validate_job(spec_with(**{"spec.resources": {"gpus": 2}, "spec.procsPerNode": "auto"}))
    envs = [pod_env(job, node_rank=i, master_addr="127.0.0.1", local=True) for i in range(2)]
    _gpu_env(job, envs)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["4,5", "6,7"]
    assert all(e["KDIST_GPUS"] == "2" and e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
               for e in envs)


def test_local_run_refuses_a_gpu_job_that_does_not_fit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    spec = write_spec(tmp_path, spec_with(**{"spec.resources": {"gpus": 2}}))
    res = CliRunner().invoke(main, ["run", "--local", str(spec)])
    assert res.exit_code == 2
    (line,) = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert "need 4 GPUs, this machine has 1" in line


# --- bench/gpu.py's peak table -----------------------------------------------------------------


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H100 80GB HBM3", 989.0), ("NVIDIA A100-SXM4-80GB", 312.0), ("NVIDIA L4", 121.0),
    ("NVIDIA L40S", 362.0), ("NVIDIA B200", 2250.0), ("NVIDIA GH200 480GB", 989.0),
    ("NVIDIA L40", None), ("NVIDIA A10G", None), ("NVIDIA GB200", None), ("Tesla T4", None),
])
def test_gpu_names_match_whole_tokens(name, peak):
    assert _peak(name) == peak
    if peak is not None:
        assert peak in BF16_PEAK_TFLOPS.values()


def test_one_env_contract_for_pods_and_local_nodes_but_no_pod_interface_locally():
    job = validate_job(spec_with(**{"spec.distributed": {"socketInterface": "eth0"},
                                    "spec.resources": {"gpus": 1}}))
    pod = pod_env(job, node_rank=None, master_addr="j-0.j", code_sha256="ab" * 32)
    local = pod_env(job, node_rank=0, master_addr="127.0.0.1", local=True)
    assert pod["GLOO_SOCKET_IFNAME"] == "eth0" and "GLOO_SOCKET_IFNAME" not in local
    assert pod["KDIST_CODE_SHA256"] == "ab" * 32 and "KDIST_CODE_SHA256" not in local
    assert pod["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == local["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    # HOME: a pod's is kdist's writable one, a local node keeps this machine's.
    assert pod["HOME"] == "/home/kdist" and local.get("HOME") == os.environ.get("HOME")
    same = {k for k in pod if k not in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
                                        "KDIST_CODE_SHA256", "KDIST_MASTER_ADDR", "HOME")}
    assert {k: pod[k] for k in same} == {k: local[k] for k in same}
