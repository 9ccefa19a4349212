"""kdist.runtime.launch's pure parts: env -> LaunchPlan, argv, the master wait. No processes."""

from __future__ import annotations

import dataclasses
import socket
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdist.runtime.launch import (
    LaunchError,
    LaunchPlan,
    _cause,
    _entrypoint,
    parse_argv,
    resolve_env,
    wait_for_master,
)
from kdist.shared import exitcodes


def no_gpus() -> int:
    return 0


def indexed_job_env(job: str, nodes: int, procs: int, index: int, port: int = 29500) -> dict:
    """What an Indexed Job pod gets (the lead's env contract, rank from the index)."""
    return {
        "KDIST_JOB_NAME": job,
        "KDIST_NNODES": str(nodes),
        "KDIST_NPROC_PER_NODE": str(procs),
        "KDIST_NODE_RANK": str(index),
        "JOB_COMPLETION_INDEX": str(index),
        "KDIST_MASTER_ADDR": f"{job}-0.{job}",
        "KDIST_MASTER_PORT": str(port),
        "KDIST_DIST_BACKEND": "gloo",
        "OMP_NUM_THREADS": "2",
    }


def pytorchjob_env(job: str, nodes: int, procs: int, node_rank: int, port: int = 29500) -> dict:
    """What a PyTorchJob pod gets: the contract minus rank and master, plus the operator's."""
    master = f"{job}-master-0"
    return {
        "KDIST_JOB_NAME": job,
        "KDIST_NNODES": str(nodes),
        "KDIST_NPROC_PER_NODE": str(procs),
        "KDIST_MASTER_PORT": str(port),
        "KDIST_DIST_BACKEND": "gloo",
        "OMP_NUM_THREADS": "2",
        "MASTER_ADDR": master,
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(nodes),
        "RANK": str(node_rank),
        "PET_NNODES": str(nodes),
        "PET_NPROC_PER_NODE": str(procs),
        "PET_NODE_RANK": str(node_rank),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(port),
        "PYTHONUNBUFFERED": "0",
    }


def test_indexed_job_env():
    plan = resolve_env(indexed_job_env("demo", 3, 2, 1), gpu_count=no_gpus)
    assert plan == LaunchPlan(
        job_name="demo", nnodes=3, nproc_per_node=2, node_rank=1, master_addr="demo-0.demo",
        master_port=29500, backend="gloo", checkpoint_dir=None, max_restarts=0,
        rdzv_timeout_s=300, pg_timeout_s=300,
    )
    assert list(plan.global_ranks) == [2, 3]
    assert plan.world_size == 6


@given(
    nodes=st.integers(1, 64),
    procs=st.integers(1, 8),
    data=st.data(),
    port=st.integers(1, 65535),
)
def test_indexed_job_and_pytorchjob_env_give_the_same_plan(nodes, procs, data, port):
    rank = data.draw(st.integers(0, nodes - 1))
    indexed = resolve_env(indexed_job_env("j", nodes, procs, rank, port), gpu_count=no_gpus)
    operator = resolve_env(pytorchjob_env("j", nodes, procs, rank, port), gpu_count=no_gpus)
    # Only the master's name differs: each backend has its own Service.
    assert dataclasses.replace(operator, master_addr=indexed.master_addr) == indexed
    assert operator.master_addr == "j-master-0"


def test_pytorchjob_env_without_any_kdist_variable():
    env = {k: v for k, v in pytorchjob_env("p", 4, 1, 3).items() if not k.startswith("KDIST_")}
    plan = resolve_env(env, gpu_count=no_gpus)
    assert (plan.nnodes, plan.node_rank, plan.nproc_per_node) == (4, 3, 1)
    assert (plan.master_addr, plan.master_port) == ("p-master-0", 29500)


def test_pet_nnodes_beats_world_size():
    # Operators that count processes in WORLD_SIZE still say nodes in PET_NNODES.
    env = pytorchjob_env("p", 2, 4, 1)
    del env["KDIST_NNODES"]
    env["WORLD_SIZE"] = "8"
    assert resolve_env(env, gpu_count=no_gpus).nnodes == 2


def test_single_node_needs_nothing():
    plan = resolve_env({}, gpu_count=no_gpus)
    assert (plan.nnodes, plan.node_rank, plan.nproc_per_node) == (1, 0, 1)
    assert (plan.master_addr, plan.master_port, plan.backend) == ("127.0.0.1", 29500, "gloo")
    assert plan.job_name == "kdist"


def test_optional_settings():
    env = {
        "KDIST_CHECKPOINT_DIR": "/ckpt",
        "KDIST_MAX_RESTARTS": "3",
        "KDIST_RDZV_TIMEOUT": "60",
        "KDIST_PG_TIMEOUT": "120",
    }
    plan = resolve_env(env, gpu_count=no_gpus)
    assert (plan.checkpoint_dir, plan.max_restarts) == ("/ckpt", 3)
    assert (plan.rdzv_timeout_s, plan.pg_timeout_s) == (60, 120)


@pytest.mark.parametrize(
    ("gpus", "nproc", "backend"), [(0, 1, "gloo"), (1, 1, "nccl"), (8, 8, "nccl")]
)
def test_auto_procs_and_backend_follow_the_gpus(gpus, nproc, backend):
    env = {"KDIST_NPROC_PER_NODE": "auto", "KDIST_DIST_BACKEND": "auto"}
    plan = resolve_env(env, gpu_count=lambda: gpus)
    assert (plan.nproc_per_node, plan.backend) == (nproc, backend)


def test_gpu_count_is_only_asked_for_auto():
    def boom() -> int:
        raise AssertionError("asked")

    resolve_env(indexed_job_env("j", 2, 1, 0), gpu_count=boom)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KDIST_NNODES": "2"}, "KDIST_NODE_RANK is not set"),
        ({"KDIST_NNODES": "2", "KDIST_NODE_RANK": "1"}, "KDIST_MASTER_ADDR is not set"),
        ({"KDIST_NNODES": "2", "KDIST_NODE_RANK": "2", "KDIST_MASTER_ADDR": "m"},
         "KDIST_NODE_RANK=2 is out of range"),
        ({"KDIST_NNODES": "two"}, "KDIST_NNODES='two' is not an integer"),
        ({"KDIST_NNODES": "0"}, "must be >= 1"),
        ({"PET_NNODES": "1:4"}, "elastic node ranges are not supported"),
        ({"KDIST_NPROC_PER_NODE": "0"}, "KDIST_NPROC_PER_NODE='0' must be >= 1"),
        # one pipe and process each: thousands would exhaust the fds (EMFILE)
        ({"KDIST_NPROC_PER_NODE": "5000"}, "KDIST_NPROC_PER_NODE='5000' must be <= 64"),
        ({"KDIST_NNODES": "100000"}, "KDIST_NNODES='100000' must be <= 1000"),
        ({"KDIST_MASTER_PORT": "70000"}, "is not a TCP port"),
        ({"KDIST_DIST_BACKEND": "mpi"}, "must be one of nccl, gloo, auto"),
        ({"KDIST_MAX_RESTARTS": "-1"}, "KDIST_MAX_RESTARTS='-1' must be >= 0"),
    ],
)
def test_bad_env_names_the_variable(env, message):
    with pytest.raises(LaunchError, match=message):
        resolve_env(env, gpu_count=no_gpus)


def test_fixed_pet_range_is_accepted():
    assert resolve_env({"PET_NNODES": "1:1"}, gpu_count=no_gpus).nnodes == 1


def test_worker_env_sets_omp_threads_only_when_unset():
    plan = resolve_env(indexed_job_env("j", 2, 3, 1), gpu_count=no_gpus)
    assert plan.worker_env({}, cpu_count=8)["OMP_NUM_THREADS"] == "2"
    assert plan.worker_env({}, cpu_count=2)["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in plan.worker_env({"OMP_NUM_THREADS": "4"}, cpu_count=8)


def test_worker_env_restates_the_plan_for_pytorchjob_pods():
    plan = resolve_env(pytorchjob_env("p", 2, 1, 1), gpu_count=no_gpus)
    env = plan.worker_env({}, cpu_count=2)
    assert env["KDIST_NODE_RANK"] == "1"
    assert env["KDIST_MASTER_ADDR"] == "p-master-0"
    assert env["KDIST_PG_TIMEOUT"] == "300"
    assert env["TORCH_ELASTIC_WORKER_IDENTICAL"] == "1"


def test_parse_argv():
    assert parse_argv(["--module", "kdist.workloads.ddp", "--", "--max-steps", "5"]) == (
        "kdist.workloads.ddp", ["--max-steps", "5"])
    assert parse_argv(["-m", "pkg.mod"]) == ("pkg.mod", [])
    assert parse_argv(["--", "python", "train.py", "--lr", "1"]) == (
        None, ["python", "train.py", "--lr", "1"])
    # Flags after -- belong to the workload, even ones the launcher knows.
    assert parse_argv(["-m", "x", "--", "--module", "y"]) == ("x", ["--module", "y"])


@pytest.mark.parametrize("argv", [[], ["--"], ["--bogus", "--", "x"]])
def test_parse_argv_refuses(argv):
    with pytest.raises(SystemExit):
        parse_argv(argv)


def test_entrypoint():
    """The launcher starts each worker's own command (no wrapper process: it sets the
    environment itself); python workers run unbuffered (-u), as under torchrun, with the
    interpreter running kdist. Other launchers put kdist's wrapper first."""
    from kdist.runtime.worker_exec import worker_argv

    py = sys.executable
    assert worker_argv("m", ["-x"]) == [py, "-u", "-m", "m", "-x"]
    assert worker_argv(None, ["python", "t.py"]) == [py, "-u", "t.py"]
    assert worker_argv(None, ["/bin/echo", "hi"]) == ["/bin/echo", "hi"]
    wrap = ["-m", "kdist.runtime.worker_exec"]
    assert _entrypoint("m", ["-x"]) == (py, [*wrap, py, "-u", "-m", "m", "-x"])
    assert _entrypoint(None, ["python", "t.py"]) == (py, [*wrap, py, "-u", "t.py"])
    assert _entrypoint(None, ["python3", "-c", "x"]) == (py, [*wrap, py, "-u", "-c", "x"])
    assert _entrypoint(None, ["/bin/echo", "hi"]) == (py, [*wrap, "/bin/echo", "hi"])


def test_exit_codes():
    assert exitcodes.of_returncode(3) == 3
    assert exitcodes.of_returncode(-9) == 137
    assert exitcodes.of_returncode(0) == 1  # a failure never reads as success


def test_failure_cause_is_the_workers_own_error():
    assert _cause({"message": "RuntimeError: disk full", "extraInfo": {}}) == (
        ": RuntimeError: disk full")
    assert _cause("To enable traceback see: https://pytorch.org/docs/...") == ""
    assert _cause(None) == ""


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def plan_for(addr: str, port: int, node_rank: int, timeout: int = 5) -> LaunchPlan:
    env = {"KDIST_NNODES": "2", "KDIST_NODE_RANK": str(node_rank), "KDIST_MASTER_ADDR": addr,
           "KDIST_MASTER_PORT": str(port), "KDIST_RDZV_TIMEOUT": str(timeout)}
    return resolve_env(env, gpu_count=no_gpus)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wait_returns_once_the_port_listens():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        clock = FakeClock()
        wait_for_master(plan_for("127.0.0.1", server.getsockname()[1], 1),
                        clock=clock, sleep=clock.sleep)
        assert clock.now == 0


def test_node_zero_does_not_wait_for_its_own_port():
    clock = FakeClock()
    wait_for_master(plan_for("127.0.0.1", closed_port(), 0), clock=clock, sleep=clock.sleep)
    assert clock.now == 0


def test_wait_times_out_naming_the_address():
    port = closed_port()
    clock = FakeClock()
    with pytest.raises(LaunchError, match=rf"master 127.0.0.1:{port} does not accept TCP.*5s"):
        wait_for_master(plan_for("127.0.0.1", port, 1), clock=clock, sleep=clock.sleep)
    assert clock.now == pytest.approx(5)


def test_a_refused_master_is_asked_again_soon():
    """Node 0's launcher binds the port first thing; a node that backed off for seconds
    would start its workers (and so rank 0's first step) that much later."""
    port = closed_port()
    clock = FakeClock()
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.sleep(seconds)

    with pytest.raises(LaunchError):
        wait_for_master(plan_for("127.0.0.1", port, 1), clock=clock, sleep=sleep)
    assert max(sleeps) <= 0.2 and len(sleeps) >= 25


def test_wait_times_out_on_a_name_that_never_resolves():
    clock = FakeClock()
    with pytest.raises(LaunchError, match="master nowhere.invalid:29500 does not resolve"):
        wait_for_master(plan_for("nowhere.invalid", 29500, 0, timeout=1),
                        clock=clock, sleep=clock.sleep)


def test_local_runs_keep_checkpoints_in_the_working_directory(tmp_path):
    from kdist.local.state import local_checkpoint_dir
    from kdist.spec import validate_job
    from tests.unit.helpers import spec_with

    job = validate_job(spec_with(**{"spec.checkpoint": {"path": "/checkpoints",
                                                        "volume": {"emptyDir": {}}}}))
    assert local_checkpoint_dir(job, tmp_path) == tmp_path / ".kdist" / "unit-job" / "checkpoints"
    assert local_checkpoint_dir(validate_job(spec_with()), tmp_path) is None


def test_the_specs_timeouts_reach_the_launcher_through_the_rendered_pod():
    from kdist.rendering import render
    from kdist.spec import validate_job

    from .helpers import spec_with

    job = validate_job(spec_with(**{"spec.distributed": {
        "rendezvousTimeoutSeconds": 45, "collectiveTimeoutSeconds": 90, "maxRestarts": 2}}))
    pod = render(job)[0]["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"] if "value" in e}
    plan = resolve_env({**env, "KDIST_NODE_RANK": "1"}, gpu_count=no_gpus)
    assert (plan.rdzv_timeout_s, plan.pg_timeout_s, plan.max_restarts) == (45, 90, 2)


def test_a_busy_master_port_is_tried_again_for_a_bounded_time(capfd):
    from kdist.runtime import rendezvous

    plan = resolve_env({}, gpu_count=no_gpus)
    held = socket.socket()
    held.bind(("", 0))
    held.listen()
    plan = dataclasses.replace(plan, master_port=held.getsockname()[1])
    with pytest.raises(LaunchError, match=r"Address already in use \(waited 1s for it\)"):
        rendezvous.bind(plan, wait_s=1.0)
    assert "is in use; trying again for up to 1s" in capfd.readouterr().err
    # The last attempt's process lets go of it within the bound: node 0 listens.
    import threading
    threading.Timer(0.5, held.close).start()
    sock = rendezvous.bind(plan, wait_s=10.0)
    assert sock is not None and sock.getsockname()[1] == plan.master_port
    sock.close()
