"""Node 0, the store's host, frozen with a warm spare: the store moves (issue 54).

Two node ranks and one spare (slot 2), real launchers and gloo workers restarting in
process, each slot's store on a port of its own (``KDIST_SLOT_PORTS``: one address for
every local node). Node 0's launcher and workers are stopped with SIGSTOP; node 1 finds
the store silent within ``nodeLossSeconds``, hosts a new one at its own address
(``kdist.runtime.hostmove``), the spare finds it there and takes rank 0, and the gang
resumes from node 1's memory: no step lost. Node 0, thawed, finds the store moved and
exits 206 (fenced) without touching anything; the job ends with the parameters an
uninterrupted run reaches.

``python tests/dist/test_host_loss.py [RUNS]`` measures "frozen -> first resumed step"
(``nodeLossSeconds: 10``), as ``test_spares.py`` does for node 1.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import tempfile
from pathlib import Path

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from disttools import final_state  # noqa: E402
from test_spares import SPARES, drill, ledger_of, start, uninterrupted  # noqa: E402, F401

MOVABLE = {"KDIST_SLOT_ADDR": "127.0.0.1", "KDIST_SLOT_PORTS": "1"}


def steps_of(lines: list[str], rank: int) -> list[int]:
    return [json.loads(line.split("] ", 1)[1])["step"] for line in lines
            if line.startswith(f"[rank {rank}] ") and '"event": "step"' in line]


@pytest.mark.timeout(400)
def test_node_0_frozen_the_store_moves_a_spare_takes_rank_0_and_node_0_is_fenced(
        tmp_path, uninterrupted):  # noqa: F811
    proc, envs = start(tmp_path, SPARES, more=MOVABLE)
    lines, resumed = drill(proc, thaw_after='"event": "resume"', node=0)
    text = "\n".join(lines)
    assert resumed is not None, text  # the gang resumed without node 0 coming back
    port = int(envs[0]["KDIST_MASTER_PORT"])
    assert f"[node 1] kdist.launch: node 0 (slot 0), the store's host, is lost: this node " \
        f"(rank 1) hosts the store now at 127.0.0.1:{port + 1}" in text, text
    assert "[node 2] kdist.launch: spare in slot 2 takes node rank 0" in text, text
    # no step lost: the gang resumed from node 1's memory, at the last step it made
    first = next(i for i, line in enumerate(lines) if '"event": "resume"' in line)
    before = max(steps_of(lines[:first], 1))
    resumes = [json.loads(line.split("] ", 1)[1]) for line in lines[first:]
               if '"event": "resume"' in line]
    assert {r["source"] for r in resumes} == {f"memory of rank 1, step {before}"}, text
    # node 0 came back and was fenced before it led or wrote anything
    fenced = [line for line in lines if line.startswith("[node 0] kdist.launch: fenced")]
    assert fenced and fenced[-1].endswith("exiting 206"), text
    assert "store moved" in fenced[-1] or "slot 2 holds it" in fenced[-1], text
    assert not any(line.startswith("[node 0] kdist.launch: restarting") for line in lines), text
    assert proc.returncode == 0, text
    done = [json.loads(line.split("] ", 1)[1]) for line in lines
            if '"event": "done"' in line]
    assert sorted(d["rank"] for d in done) == [0, 1], text
    state = final_state(tmp_path / "ckpt")  # the right result, every step made once
    for name, value in uninterrupted["model"].items():
        assert torch.equal(state["model"][name], value), name
    restarts = ledger_of(lines)["restarts"]
    assert len(restarts) == 1 and "node 0 lost (silent for" in restarts[0]["cause"], restarts
    assert restarts[0].get("spare") in (None, "slot 2 took rank 0"), restarts


@pytest.mark.timeout(400)
def test_node_0_frozen_an_elastic_gang_moves_the_store_and_goes_on_smaller(tmp_path):
    """3 nodes, ``minNodes`` 2, no spare: node 1 hosts the store, the gang shrinks to node
    ranks held by slots 1 and 2 (node 1 renumbered to rank 0, the host), and node 0, back,
    is fenced."""
    import test_elastic as E

    proc = E.start(tmp_path, more=MOVABLE)
    lines, _, resumed = E.drill(proc, 0, 2)
    text = "\n".join(lines)
    assert resumed is not None, text
    assert "[node 1] kdist.launch: node 0 (slot 0), the store's host, is lost: this node " \
        "(rank 1) hosts the store now" in text, text
    for node in (1, 2):
        assert f"[node {node}] {E.shrank(0)} (generation 2: node ranks held by slots 1, 2)" \
            in text, text
    fenced = [line for line in lines if line.startswith("[node 0] kdist.launch: fenced")]
    assert fenced and fenced[-1].endswith("exiting 206"), text
    assert proc.returncode == 0, text
    back = E.records(lines, "resume")
    assert back and {r["world_size"] for r in back} == {2}, text
    assert sorted(d["rank"] for d in E.records(lines, "done")) == [0, 1], text
    restarts = ledger_of(lines)["restarts"]
    assert len(restarts) == 1 and "node 0 lost (silent for" in restarts[0]["cause"], restarts
    assert restarts[0]["shrank"] == "shrank to 2 nodes: node 0 lost", restarts


def measure(runs: int) -> None:
    """Median seconds from node 0 frozen to the gang's first resumed step (a spare,
    nodeLossSeconds 10)."""
    took = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            proc, _ = start(Path(tmp), SPARES, loss_s=10, more=MOVABLE)
            try:
                _, resumed = drill(proc, thaw_after='"event": "resume"', node=0)
            finally:
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGINT)
                    proc.communicate(timeout=60)
            if resumed is not None:
                took.append(resumed)
    if took:
        print(f"node 0 frozen, spare: median {statistics.median(took):.1f} s of {len(took)} "
              f"({', '.join(f'{t:.1f}' for t in took)})", flush=True)


if __name__ == "__main__":
    measure(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
