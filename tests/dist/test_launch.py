"""kdist.launch with real processes: ranks, exit codes, the master wait, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from disttools import free_port, node_env, run_envs, run_job

SHOW_ENV = textwrap.dedent("""
    import json, os
    keys = ["RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT", "KDIST_NODE_RANK", "OMP_NUM_THREADS"]
    print(json.dumps({k: os.environ.get(k) for k in keys}))
""")


def pytorchjob_node_env(nodes: int, procs: int, node_rank: int, port: int) -> dict[str, str]:
    """A PyTorchJob pod's env: no KDIST_NODE_RANK / KDIST_MASTER_ADDR; the operator's instead."""
    env = node_env(nodes, procs, node_rank, port)
    del env["KDIST_NODE_RANK"], env["KDIST_MASTER_ADDR"]
    env.update({
        "RANK": str(node_rank), "WORLD_SIZE": str(nodes),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
        "PET_NNODES": str(nodes), "PET_NPROC_PER_NODE": str(procs),
        "PET_NODE_RANK": str(node_rank), "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(port),
    })
    return env


def worker_envs(run) -> dict[int, dict]:
    seen = {}
    for line in run.lines:
        if line.startswith("[rank ") and line.endswith("}"):
            prefix, body = line.split("] ", 1)
            env = json.loads(body)
            assert prefix == f"[rank {env['RANK']}"  # the prefix is the global rank
            seen[int(env["RANK"])] = env
    return seen


@pytest.mark.timeout(90)
def test_indexed_job_and_pytorchjob_pods_get_the_same_ranks():
    """One job of two nodes: node 0 as a PyTorchJob pod, node 1 as an Indexed Job pod.

    (tests/unit/test_launch_env.py shows that each pod's env maps to the same
    plan either way; this shows the plan's ranks reach the workers.)
    """
    port = free_port()
    operator = pytorchjob_node_env(2, 2, 0, port)
    del operator["OMP_NUM_THREADS"]  # unset: the launcher shares the CPUs among workers
    os_env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    run = run_envs(["--", "python", "-c", SHOW_ENV],
                   [{**os_env, **operator}, node_env(2, 2, 1, port)])
    assert run.code == 0, run.text
    seen = worker_envs(run)
    ranks = {r: (e["GROUP_RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"],
                 e["KDIST_NODE_RANK"], e["MASTER_PORT"]) for r, e in seen.items()}
    assert ranks == {
        0: ("0", "0", "4", "2", "0", str(port)), 1: ("0", "1", "4", "2", "0", str(port)),
        2: ("1", "0", "4", "2", "1", str(port)), 3: ("1", "1", "4", "2", "1", str(port)),
    }
    threads = str(max(1, len(os.sched_getaffinity(0)) // 2))
    assert [seen[r]["OMP_NUM_THREADS"] for r in range(4)] == [threads, threads, "1", "1"]


@pytest.mark.timeout(60)
def test_worker_exit_code_is_the_launchers():
    code = "import os, sys; sys.exit(7 if os.environ['RANK'] == '1' else 0)"
    run = run_job(["--", "python", "-c", code], procs=2)
    assert run.code == 7, run.text
    assert "worker rank 1 (node 0, local rank 1" in run.text
    assert "exited with code 7" in run.text


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("addr", "problem"),
    [("127.0.0.1", "does not accept TCP connections"),
     ("kdist-nowhere.invalid", "does not resolve")],
)
def test_unreachable_master_fails_bounded_with_its_address(addr, problem):
    port = free_port()  # nobody listens there
    env = node_env(2, 1, 1, port, KDIST_MASTER_ADDR=addr, KDIST_RDZV_TIMEOUT="2")
    run = run_envs(["--", "python", "-c", "pass"], [env])
    assert run.code == 2, run.text
    assert run.seconds < 15
    assert f"kdist.launch: master {addr}:{port} {problem}" in run.text
    assert "after 2s (KDIST_RDZV_TIMEOUT)" in run.text


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.timeout(120)
def test_ctrl_c_stops_every_process_group():
    # The seed marks this test's workers on their command lines.
    seed = str(os.getpid())
    marker = f"--seed\0{seed}\0"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from disttools import LAUNCH, TINY, node_env
        from kdist.local import local_env, run_nodes
        argv = [*LAUNCH, "--module", "kdist.workloads.ddp", "--", *TINY, "--seed", {seed!r},
                "--max-steps", "1000000", "--log-every", "50", "--batch-size", "16"]
        envs = [local_env(node_env(2, 1, i, {free_port()})) for i in range(2)]
        sys.exit(run_nodes(argv, envs))
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if '"event": "step"' in line:
            break
    assert len(_processes_with(marker)) == 4  # two launchers, two workers
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + signal.SIGINT, rest
    assert time.monotonic() - started < 45
    assert _processes_with(marker) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("exit_code", "attempts"), [(1, 1), (137, 3)])
def test_the_local_runner_restarts_every_node_only_on_retryable_exits(
        exit_code, attempts, capfd):
    """A code error ends the job at once; a kill restarts every node, maxRestarts times."""
    code = (f"import os, sys; print('attempt', flush=True); "
            f"sys.exit({exit_code} if os.environ['RANK'] == '1' else 0)")
    run = run_job(["--", "python", "-c", code], nodes=2, KDIST_MAX_RESTARTS="2")
    assert run.code == exit_code, run.text
    # Every attempt starts both nodes' workers.
    assert sum(line.endswith("] attempt") for line in run.lines) == 2 * attempts, run.text
    notices = [line for line in capfd.readouterr().err.splitlines() if "restarting every" in line]
    assert len(notices) == attempts - 1
    if notices:
        assert notices[-1].startswith(f"kdist: node 1 exited with code {exit_code}")
        assert "(restart 2 of 2)" in notices[-1]


PEER_LOST_SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import torch, torch.distributed as dist
    from kdist.workloads.common import init_distributed
    d = init_distributed()
    t = torch.ones(4)
    for step in range(1000):
        if d.rank == 1 and step == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)
        time.sleep(0.01)
""")


@pytest.mark.timeout(120)
def test_a_users_script_that_loses_a_peer_exits_peer_lost():
    """init_distributed makes an uncaught lost-peer error exit 203, not 1 (a code error)."""
    run = run_job(["--", "python", "-c", PEER_LOST_SCRIPT], nodes=2)
    assert run.code == 137, run.text  # the kill names the job's failure ...
    node0 = [line for line in run.lines if line.startswith("[node 0]")]
    # ... and rank 0 saw a lost peer, not a code error.
    assert any("kdist: rank 0 lost a peer" in line for line in run.lines), run.text
    assert any("exiting 203: lost a peer" in line for line in node0), run.text


LATE_SCRIPT = textwrap.dedent("""
    import time
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 1:
        time.sleep(18)  # longer than nodeLossSeconds (10)
    print("bye", rank, flush=True)
""")


@pytest.mark.timeout(120)
def test_a_node_that_finishes_later_is_waited_for_not_declared_lost():
    """Rank 0 (and its store) is gone long before rank 1 ends: node 0's launcher answers
    on the master port in its exit barrier, so node 1 does not read node 0 as lost, and
    node 0 exits only once node 1 is done (torch's agent waited likewise)."""
    run = run_job(["--", "python", "-c", LATE_SCRIPT], nodes=2)
    assert run.code == 0, run.text
    assert "lost (silent for" not in run.text, run.text
    assert run.lines.index("[rank 0] bye 0") < run.lines.index("[rank 1] bye 1"), run.text


OWN_PORT_SCRIPT = textwrap.dedent("""
    import os, sys
    from datetime import timedelta
    import torch.distributed as dist
    import torch.multiprocessing as mp

    def main(rank, world):
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", sys.argv[1]
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=timedelta(seconds=5))
        dist.barrier()

    if __name__ == "__main__":
        mp.spawn(main, args=(2,), nprocs=2)
""")


@pytest.mark.timeout(120)
def test_a_group_that_never_formed_is_a_code_error_not_a_lost_peer(tmp_path):
    """mp.spawn on a port of its own: the store it looks for is not there, so the group
    never forms. No peer was lost: a restart would fail the same way."""
    script = tmp_path / "own_port.py"
    script.write_text(OWN_PORT_SCRIPT)
    run = run_job(["--", "python", str(script), str(free_port())], KDIST_MAX_RESTARTS="2")
    assert run.code == 1, run.text
    assert "restarting every node" not in run.text
    assert not any("exiting 203" in line for line in run.lines), run.text
    assert any("exiting 1: " in line and "connect" in line for line in run.lines), run.text


SHOW_STORE = textwrap.dedent("""
    import os, sys, torch.distributed as dist
    dist.init_process_group("gloo")
    served = getattr(sys.modules.get("kdist_sitehook"), "_served", [])
    if served:  # rank 0's worker serves the job's store (kdist.runtime.sitehook)
        print("libuv", served[0].libuvBackend, flush=True)
    # The client env:// made: the TCPStore under the group's PrefixStores.
    client = dist.distributed_c10d._get_default_store()
    while hasattr(client, "underlying_store"):
        client = client.underlying_store
    print("env client libuv", client.libuvBackend, flush=True)
    dist.barrier()
    dist.destroy_process_group()
""")
# Where USE_LIBUV is unset, torch's default: libuv (an image without libuv sets it to 0).
DEFAULT_LIBUV = os.environ.get("USE_LIBUV", "1") == "1"


SHOW_CLIENT = textwrap.dedent("""
    from datetime import timedelta
    from kdist.workloads.common import _agent_store
    store = _agent_store(timedelta(seconds=30))
    print("client libuv", store.underlying_store.libuvBackend, flush=True)
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("use_libuv", "backend"), [(None, DEFAULT_LIBUV), ("0", False)])
def test_kdists_workloads_join_the_store_as_torchs_use_libuv_switch_says(use_libuv, backend):
    """kdist's own workloads open the job's store as a client themselves, and torch's
    TCPStore ignores USE_LIBUV: a torch without libuv refused them until they read it."""
    extra = {} if use_libuv is None else {"USE_LIBUV": use_libuv}
    run = run_job(["--", "python", "-c", SHOW_CLIENT], nodes=2, **extra)
    assert run.code == 0, run.text
    assert sorted(line for line in run.lines if "libuv" in line) == \
        [f"[rank 0] client libuv {backend}", f"[rank 1] client libuv {backend}"], run.text


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("use_libuv", "backend"), [(None, DEFAULT_LIBUV), ("0", False)])
def test_the_served_store_follows_torchs_use_libuv_switch(use_libuv, backend):
    """USE_LIBUV=0 (what a torch built without libuv, Debian's, needs) reaches the store
    rank 0's worker serves, and the clients torch's env:// rendezvous opens on it: under an
    agent's store torch opens them with libuv whatever USE_LIBUV says (the sitehook's
    clients_follow_use_libuv), which a torch without libuv refused in every script."""
    extra = {} if use_libuv is None else {"USE_LIBUV": use_libuv}
    run = run_job(["--", "python", "-c", SHOW_STORE], nodes=2, **extra)
    assert run.code == 0, run.text
    assert [line for line in run.lines if line.startswith("[rank 0] libuv")] == \
        [f"[rank 0] libuv {backend}"], run.text
    assert sorted(line for line in run.lines if "env client libuv" in line) == \
        [f"[rank {r}] env client libuv {backend}" for r in (0, 1)], run.text


@pytest.mark.timeout(60)
def test_an_unsupported_torch_stops_every_node_before_any_worker_starts(tmp_path):
    """An image whose torch kdist was never tested on (here a stand-in that says 2.3 and
    cannot even be imported) fails the job at once: exit 2, a code error, never retried."""
    stub = tmp_path / "torch"
    stub.mkdir()
    (stub / "__init__.py").write_text("raise SystemExit('imported')\n")
    (stub / "version.py").write_text("__version__ = '2.3.1'\n")
    run = run_job(["--", "python", "-c", "print('worker started')"], nodes=2,
                  PYTHONPATH=str(tmp_path))
    assert run.code == 2, run.text
    refused = [line for line in run.lines if "torch 2.3 in this image" in line]
    assert len(refused) == 2, run.text
    assert "kdist's runtime needs 2.8-2.15" in refused[0]
    assert not any("worker started" in line or "imported" in line for line in run.lines), run.text
    # Told to try it anyway, the launcher starts the (torch-free) workers.
    run = run_job(["--", "python", "-c", "print('worker started')"], nodes=1,
                  PYTHONPATH=str(tmp_path), KDIST_ANY_TORCH="1")
    assert run.code == 0 and "worker started" in run.text, run.text
