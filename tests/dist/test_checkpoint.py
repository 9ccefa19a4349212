"""kdist.checkpoint in one process (a gloo group of one): layout, verification, fallback."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

from kdist.workloads.checkpoint import LATEST, MANIFEST, Checkpointer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module", autouse=True)
def group_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def state(value: float) -> dict:
    return {"w": torch.full((3,), value), "step": int(value)}


def test_save_publishes_a_complete_directory_and_moves_latest(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=0)
    path = ckpt.save(4, {"state": state(4)}, {"loss": 1.5})
    assert path == tmp_path / "step-4"
    assert (tmp_path / LATEST).read_text() == "step-4\n"
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["step"] == 4 and manifest["meta"] == {"loss": 1.5}
    assert set(manifest["files"]) == {"state.pt"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [LATEST, "step-4"]


def test_load_returns_the_newest(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=0)
    assert ckpt.load(["state"]) is None
    for step in (4, 8):
        ckpt.save(step, {"state": state(step)}, {})
    loaded = ckpt.load(["state"])
    assert (loaded.step, loaded.name) == (8, "step-8")
    assert torch.equal(loaded.shards["state"]["w"], torch.full((3,), 8.0))


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "manifest"])
def test_a_damaged_newest_checkpoint_falls_back(tmp_path, damage, capsys):
    ckpt = Checkpointer(tmp_path, keep=0)
    for step in (4, 8):
        ckpt.save(step, {"state": state(step)}, {})
    shard = tmp_path / "step-8" / "state.pt"
    data = shard.read_bytes()
    if damage == "truncate":
        shard.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        shard.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif damage == "delete":
        shard.unlink()
    else:
        (tmp_path / "step-8" / MANIFEST).unlink()
    assert ckpt.load(["state"]).step == 4
    assert "step-8" in capsys.readouterr().err


def test_latest_pointing_nowhere_falls_back_to_the_newest_directory(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=0)
    ckpt.save(4, {"state": state(4)}, {})
    (tmp_path / LATEST).write_text("step-99\n")
    assert ckpt.load(["state"]).step == 4


def test_a_rank_without_shards_agrees_on_the_step(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=0)
    ckpt.save(4, {"state": state(4)}, {"loss": 0.5})
    loaded = ckpt.load([])
    assert (loaded.step, loaded.shards, loaded.meta) == (4, {}, {"loss": 0.5})


def test_keep_prunes_older_checkpoints(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=2)
    for step in (2, 4, 6, 8):
        ckpt.save(step, {"state": state(step)}, {})
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-6", "step-8"]


def test_stale_partial_directories_are_removed_and_never_loaded(tmp_path):
    stale = tmp_path / ".tmp-deadbeef-step-12"
    stale.mkdir(parents=True)
    (stale / "state.pt").write_bytes(b"half")
    ckpt = Checkpointer(tmp_path, keep=0)
    assert not stale.exists()
    assert ckpt.load(["state"]) is None


def test_saving_a_step_again_replaces_it(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=0)
    ckpt.save(4, {"state": state(4)}, {})
    (tmp_path / "step-4" / "state.pt").write_bytes(b"corrupt")
    ckpt.save(4, {"state": state(5)}, {})
    assert ckpt.load(["state"]).shards["state"]["step"] == 5


SAVER = """
import sys, torch, torch.distributed as dist
from kdist.workloads.checkpoint import Checkpointer
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
ckpt = Checkpointer(sys.argv[1], keep=3)
loaded = ckpt.load(["state"])
step = loaded.step if loaded else 0
print("ready", flush=True)
while True:
    step += 1
    ckpt.save(step, {"state": {"w": torch.full((4_000_000,), float(step)), "step": step}},
              {"step": step})
"""


@pytest.mark.timeout(240)
def test_a_crash_during_a_save_never_leaves_a_checkpoint_that_loads_wrong(tmp_path):
    """SIGKILL a real saver at random moments, mostly mid-save; every load is whole and right."""
    import random
    import signal
    import subprocess
    import sys
    import time

    rng = random.Random(6)
    torn, last = 0, 0
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.3, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        torn += bool(list(tmp_path.glob(".tmp-*")) or list(tmp_path.glob("*/*.part")))
        loaded = Checkpointer(tmp_path, keep=0).load(["state"])
        assert loaded is not None
        state = loaded.shards["state"]
        assert state["step"] == loaded.step == loaded.meta["step"]
        assert torch.equal(state["w"], torch.full((4_000_000,), float(loaded.step)))
        assert loaded.step >= last  # never back past a checkpoint that was complete
        last = loaded.step
    assert torn >= 2, "the kills never landed inside a save: the test proved nothing"
