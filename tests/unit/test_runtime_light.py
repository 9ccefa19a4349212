"""The light launcher: no torch in it, torchrun's worker env, torch's store protocol spoken."""

from __future__ import annotations

import datetime
import inspect
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kdist.runtime import rendezvous as R
from kdist.runtime import workers as W
from kdist.runtime.plan import resolve_env
from kdist.runtime.store import MiniStore, StoreClient, listen

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def plan(nodes: int = 2, procs: int = 2, node: int = 1, port: int = 29500, **extra: str):
    return resolve_env({"KDIST_JOB_NAME": "j", "KDIST_NNODES": str(nodes),
                        "KDIST_NPROC_PER_NODE": str(procs), "KDIST_NODE_RANK": str(node),
                        "KDIST_MASTER_ADDR": "127.0.0.1", "KDIST_MASTER_PORT": str(port),
                        "KDIST_DIST_BACKEND": "gloo", **extra})


# --- no torch in the launcher ------------------------------------------------------------


def test_importing_the_launcher_loads_no_torch():
    code = ("import sys, kdist.launch, kdist.runtime.agent, kdist.runtime.watchdog; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


@pytest.mark.timeout(120)
def test_a_whole_run_of_two_nodes_imports_torch_only_in_the_workers(tmp_path):
    """Both launchers run to the end (rendezvous, watchdog, exit barrier) under
    ``-X importtime``, which their workers do not inherit: no torch module is imported
    by a launcher, while each worker does import it."""
    port = free_port()
    worker = "import torch, sys; print('worker', torch.__name__, file=sys.stderr)"
    procs = []
    for node in range(2):
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("KDIST_")},
               "KDIST_JOB_NAME": "t", "KDIST_NNODES": "2", "KDIST_NPROC_PER_NODE": "1",
               "KDIST_NODE_RANK": str(node), "KDIST_MASTER_ADDR": "127.0.0.1",
               "KDIST_MASTER_PORT": str(port), "KDIST_DIST_BACKEND": "gloo",
               "KDIST_RDZV_TIMEOUT": "60", "PYTHONPATH": str(ROOT)}
        procs.append(subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "kdist.launch", "--", "python", "-c",
             worker], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    outs = [p.communicate(timeout=100) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "worker torch" in out  # the worker's output, through the launcher
        imported = [line.rsplit("|", 1)[-1].strip() for line in err.splitlines()
                    if line.startswith("import time:")]
        assert "kdist.runtime.agent" in imported  # importtime did watch the launcher
        assert not [m for m in imported if m == "torch" or m.startswith("torch.")], err


# --- the worker env is torchrun's --------------------------------------------------------


def test_every_variable_torchs_agent_sets_is_set_with_torchs_values(tmp_path):
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous

    source = inspect.getsource(LocalElasticAgent._start_workers)
    block = source[source.index("worker_env = {"):]
    block = block[:block.index("}")]
    torchs = set(re.findall(r'"([A-Z_]+)":', block)) | {"LOCAL_RANK"}
    assert {"RANK", "GROUP_WORLD_SIZE", "TORCHELASTIC_USE_AGENT_STORE"} <= torchs  # parsed
    p = plan(nodes=2, procs=2, node=1, port=29511, KDIST_RESTART_COUNT="1",
             KDIST_MAX_RESTARTS="3")
    launcher_env = {**p.worker_env({}, 4), "PATH": "/bin"}
    env = W.worker_env(p, 1, launcher_env, str(tmp_path / "e.json"))
    assert torchs <= set(env), sorted(torchs - set(env))
    assert {k: env[k] for k in sorted(torchs)} == {
        "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511",
        "RANK": "3", "ROLE_NAME": "trainer", "ROLE_RANK": "3", "ROLE_WORLD_SIZE": "4",
        "TORCHELASTIC_MAX_RESTARTS": "3", "TORCHELASTIC_RESTART_COUNT": "1",
        "TORCHELASTIC_RUN_ID": "j",
        "TORCHELASTIC_USE_AGENT_STORE": str(StaticTCPRendezvous.use_agent_store.fget(None)),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "WORLD_SIZE": "4",
    }
    assert env["TORCHELASTIC_ERROR_FILE"] == str(tmp_path / "e.json")
    assert env["OMP_NUM_THREADS"] == "2"  # the launcher's share, passed on as torch does
    assert W.STORE_FD not in W.worker_env(p, 0, {**launcher_env, W.STORE_FD: "5"}, "e")
    set_by_user = W.worker_env(p, 0, {**launcher_env, "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"},
                               "e")
    assert set_by_user["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"


# --- torch's store protocol, both ways -----------------------------------------------------


def test_the_client_speaks_to_torchs_own_store():
    import torch.distributed as dist

    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=10),
                           wait_for_workers=False)
    client = StoreClient("127.0.0.1", port, timeout=5)
    try:
        assert client.add("kdist/n", 2) == 2 and client.add("kdist/n", 3) == 5
        assert not client.check(["kdist/v"])
        client.set("kdist/v", b"x")
        assert client.check(["kdist/v", "kdist/n"])
        client.wait(["kdist/v"], timeout=5)
    finally:
        client.close()
    del server


def test_torchs_client_speaks_to_the_mini_store():
    import torch.distributed as dist

    listener = listen(free_port())
    port = listener.getsockname()[1]
    mini = MiniStore(listener).start()
    try:
        client = dist.TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=10))
        client.set("k", "v")
        assert client.get("k") == b"v"
        assert client.add("n", 4) == 4 and mini.add("/n", 1) == 5  # torch prefixes keys "/"
        assert client.check(["k"]) and not client.check(["absent"])
    finally:
        mini.stop()
        listener.close()


def test_rank_0s_worker_serves_the_store_on_the_launchers_socket(tmp_path):
    """The launcher binds the port; a worker that imports torch serves the store on the
    very socket (connections made before it did wait in the backlog)."""
    listener = listen(free_port())
    port = listener.getsockname()[1]
    code = "import os, sys, time, torch; print(os.environ.get('KDIST_STORE_FD')); time.sleep(3)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([W.worker_exec.SITEHOOK, str(ROOT)]),
           W.STORE_FD: str(listener.fileno()), "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "KDIST_PG_TIMEOUT": "30"}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, pass_fds=(listener.fileno(),),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        client = StoreClient("127.0.0.1", port, timeout=60)  # before torch is imported
        assert client.add("kdist/x", 7) == 7
        client.close()
        out, err = proc.communicate(timeout=60)
        assert out.strip() == "None", err  # not passed on to what the worker starts
        assert err == ""
    finally:
        if proc.poll() is None:
            proc.kill()
        listener.close()


# --- rendezvous and exit barrier -----------------------------------------------------------


def _nodes(nodes: int, port: int, timeout: str = "20") -> list:
    return [plan(nodes=nodes, procs=1, node=i, port=port, KDIST_RDZV_TIMEOUT=timeout)
            for i in range(nodes)]


def test_every_node_starts_only_once_all_joined_and_the_barrier_waits_for_all():
    port = free_port()
    plans = _nodes(3, port)
    listener = R.bind(plans[0])
    assert listener is not None and R.bind(plans[1]) is None
    joined: dict[int, float] = {}

    def node(i: int, delay: float) -> None:
        time.sleep(delay)
        R.rendezvous(plans[i], listener if i == 0 else None, time.monotonic())
        joined[i] = time.monotonic()

    threads = [threading.Thread(target=node, args=(i, d)) for i, d in ((0, 0), (1, 0), (2, 1.0))]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(joined) == [0, 1, 2]
    assert min(joined.values()) - started >= 1.0  # nobody went before the late node
    # The exit barrier: node 0 answers on the port; the others report there.
    barriers = [R.ExitBarrier(p, listener if p.node_rank == 0 else None) for p in plans]
    barriers[0].serve()
    try:
        reports = [threading.Thread(target=b.wait, args=(10.0,)) for b in barriers[1:]]
        for t in reports:
            t.start()
        assert barriers[0].wait(10.0) == ""
    finally:
        barriers[0].stop()
        listener.close()


def test_a_node_goes_on_only_once_node_0_stopped_serving_the_rendezvous(monkeypatch):
    """A warm worker connects to the master port within milliseconds of its node's GO: by
    then node 0's rendezvous server must no longer accept there, or it takes the worker's
    store connection and closes it under it ("broken pipe", a second restart)."""
    monkeypatch.setattr(R, "_POLL_S", 0.5)  # node 0 notices the release late: a wide window
    port = free_port()
    plans = _nodes(2, port)
    listener = R.bind(plans[0])
    assert listener is not None
    lead = threading.Thread(target=R.rendezvous, args=(plans[0], listener, time.monotonic()))
    lead.start()
    try:
        R.rendezvous(plans[1], None, time.monotonic())
        # A worker's first move: nobody may answer it until rank 0's store does.
        with pytest.raises(OSError):
            StoreClient("127.0.0.1", port, timeout=1.0)
    finally:
        lead.join(timeout=30)
        listener.close()


def test_a_node_that_never_comes_fails_the_rendezvous_bounded():
    port = free_port()
    plans = _nodes(2, port, timeout="1")
    listener = R.bind(plans[0])
    started = time.monotonic()
    try:
        with pytest.raises(R.RendezvousError, match=r"rendezvous of 2 node\(s\) at 127.0.0.1:"
                           rf"{port} failed \(KDIST_RDZV_TIMEOUT=1s\): 1 of 2 node\(s\) joined"):
            R.rendezvous(plans[0], listener, started)
    finally:
        listener.close()
    assert time.monotonic() - started < 5
    with pytest.raises(R.RendezvousError, match="did not answer"):
        R.rendezvous(plans[1], None, time.monotonic())


def test_a_failed_node_tells_node_0s_barrier_not_to_wait_for_it():
    port = free_port()
    plans = _nodes(2, port)
    listener = R.bind(plans[0])
    lead = R.ExitBarrier(plans[0], listener)
    lead.serve()
    try:
        R.ExitBarrier(plans[1], None).report_failure()
        started = time.monotonic()
        assert lead.wait(10.0) == "1 other node(s) reported failed workers"
        assert time.monotonic() - started < 2
        assert lead.peer_failed  # the agent exits PEER_LOST: the job failed, this pod is not done
    finally:
        lead.stop()
        listener.close()


def test_a_node_whose_master_is_gone_does_not_wait_at_exit():
    p = _nodes(2, free_port())[1]  # nobody listens there
    assert R.ExitBarrier(p, None).wait(10.0) == "node 0 is gone"


def test_a_node_joining_a_gang_whose_node_0_finished_fails_and_says_so():
    """Restarting in process (or a replaced pod) after node 0's workers succeeded: node 0
    answers only its exit barrier. The node does not wait for a gang that is gone: it
    tells the barrier it failed (node 0 then exits lost-peer, not 0) and fails at once."""
    port = free_port()
    plans = _nodes(2, port)
    listener = R.bind(plans[0])
    lead = R.ExitBarrier(plans[0], listener)
    lead.serve()
    started = time.monotonic()
    try:
        with pytest.raises(R.RendezvousError, match="node 0's workers already finished"):
            R.gather(plans[1], None, started, 1)
        assert time.monotonic() - started < 5
        assert lead.wait(5.0) == "1 other node(s) reported failed workers"
        assert lead.peer_failed
    finally:
        lead.stop()
        listener.close()


def test_the_gang_goes_on_from_the_highest_restart_count_any_node_brought():
    port = free_port()
    plans = _nodes(3, port)
    listener = R.bind(plans[0])
    agreed: dict[int, int] = {}

    def node(i: int, count: int) -> None:
        agreed[i] = R.gather(plans[i], listener if i == 0 else None, time.monotonic(),
                             count)[1]

    threads = [threading.Thread(target=node, args=(i, c)) for i, c in ((0, 1), (1, 2), (2, 0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    listener.close()
    assert agreed == {0: 2, 1: 2, 2: 2}
