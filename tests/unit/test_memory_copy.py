"""DDP's memory copy (issue 54, slice 3): the file of a rank's newest state and the
agreement on whose memory a restarted gang resumes from."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kdist.workloads import memory_file as M
from kdist.workloads.survivor import Plan, describe, plan, state_key

KEY = "k1"


def written(tmp_path: Path, step: int = 7, payload: bytes = b"state" * 100) -> Path:
    path = M.path_for("job/a b", 1, tmp_path)
    M.write(path, step, KEY, [payload[:7], memoryview(payload)[7:]])  # written in parts
    return path


def test_a_written_state_reads_back_whole(tmp_path):
    path = written(tmp_path)
    assert path.name == "kdist-memory-job_a_b-rank1.pt"
    held = M.read(path, KEY)
    assert held is not None and held.step == 7 and held.payload == b"state" * 100
    assert not list(tmp_path.glob(".*.part"))  # renamed into place, nothing left behind


def test_only_the_newest_state_is_kept(tmp_path):
    written(tmp_path, 3, b"old")
    path = written(tmp_path, 4, b"new")
    held = M.read(path, KEY)
    assert held is not None and (held.step, held.payload) == (4, b"new")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_missing_file_is_none_and_says_nothing(tmp_path, capsys):
    assert M.read(tmp_path / "none.pt", KEY) is None
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("damage, why", [
    (lambda b: b[:-3], "partial"),  # cut short (a writer killed mid-write, no rename)
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "does not match its CRC-32"),  # a flipped bit
    (lambda b: b"junk" + b, "not a kdist memory file"),
    (lambda b: M.MAGIC + b"{not json\n" + b, "ignored"),
])
def test_a_damaged_file_is_ignored_with_a_line(tmp_path, capsys, damage, why):
    path = written(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    assert M.read(path, KEY) is None
    err = capsys.readouterr().err
    assert err.startswith(f"kdist.workloads.memory: {path} ignored") and why in err, err


def test_another_jobs_or_models_state_is_ignored(tmp_path, capsys):
    path = written(tmp_path)
    assert M.read(path, "other") is None
    assert "another job's" in capsys.readouterr().err


def test_the_header_names_the_step_size_and_crc(tmp_path):
    path = written(tmp_path, 12, b"xyz")
    data = path.read_bytes()
    assert data.startswith(M.MAGIC)
    header = json.loads(data[len(M.MAGIC):].split(b"\n", 1)[0])
    assert (header["step"], header["bytes"]) == (12, 3)
    assert header["crc32"] == __import__("zlib").crc32(b"xyz")


def test_the_directory_is_the_env_s_else_dev_shm(tmp_path, monkeypatch):
    monkeypatch.setenv("KDIST_MEMORY_DIR", str(tmp_path))
    assert M.directory() == tmp_path
    monkeypatch.delenv("KDIST_MEMORY_DIR")
    assert M.directory() in (Path("/dev/shm"), Path(__import__("tempfile").gettempdir()))


def test_the_newest_step_is_sent_by_its_lowest_holder_to_every_rank_lacking_it():
    # a spare's new worker (rank 1) holds nothing; rank 2 is a step behind
    assert plan([5, None, 4, 5], checkpoint_step=0) == Plan(5, 0, (1, 2))
    assert plan([None, 6, 6], checkpoint_step=None) == Plan(6, 1, (0,))
    assert plan([3, 3], checkpoint_step=2) == Plan(3, 0, ())  # everyone loads its own


def test_no_memory_newer_than_the_checkpoint_means_the_checkpoint():
    assert plan([None, None], checkpoint_step=None) is None  # a first start
    assert plan([None, None], checkpoint_step=10) is None
    assert plan([10, 9], checkpoint_step=10) is None  # the checkpoint is as new
    assert plan([8, None], checkpoint_step=10) is None  # a stale copy


def test_rank_0s_line_says_what_each_rank_held():
    held = [3, None]
    assert describe(plan(held, 0), held, 0) == (  # type: ignore[arg-type]
        "resuming from the memory of rank 0, step 3 (newest checkpoint: step 0; memory: "
        "rank 0 step 3, rank 1 none): at most the step in flight is lost")
    assert "(newest checkpoint: none;" in describe(Plan(3, 0, ()), [3], None)


def test_the_key_tells_another_model_or_world_size_apart():
    args = argparse.Namespace(features=16, classes=4, hidden=32, layers=3, batch_size=8,
                              dataset_size=64, seed=0, lr=0.1, max_steps=10)
    same = argparse.Namespace(**{**vars(args), "lr": 0.5, "max_steps": 99})
    other = argparse.Namespace(**{**vars(args), "hidden": 64})
    assert state_key(args, 2) == state_key(same, 2)
    assert state_key(args, 2) != state_key(other, 2)
    assert state_key(args, 2) != state_key(args, 3)


def test_a_local_run_gives_each_node_a_dev_shm_of_its_own():
    import shutil

    from kdist.local.state import memory_dir, memory_root

    root = memory_root()
    try:
        assert Path(root).is_dir() and Path(root).name.startswith("kdist-memory-")
        # a pod restarting in place keeps its /dev/shm; a new pod (an attempt) gets a new one
        assert memory_dir(root, 1, None) == memory_dir(root, 1, None) != memory_dir(root, 0, None)
        assert memory_dir(root, 1, 0) != memory_dir(root, 1, 1)
    finally:
        shutil.rmtree(root)


def test_the_state_encodes_and_decodes_exactly_without_pickle():
    torch = pytest.importorskip("torch")
    from kdist.workloads.memory import decode, encode

    tree = {"model": {"w": torch.randn(3, 5), "b": torch.arange(3, dtype=torch.bfloat16)},
            "optimizer": {"state": {0: {"momentum_buffer": torch.randn(3, 5), "step":
                                        torch.tensor(4.0)}},
                          "param_groups": [{"lr": 0.1, "params": [0, 1], "nesterov": False,
                                            "foreach": None}]},
            "rng": torch.get_rng_state(), "empty": torch.zeros(0, 2), "step": 9, "loss": None}
    payload = b"".join(bytes(c) for c in encode(tree))
    got = decode(payload)
    assert got["step"] == 9 and got["loss"] is None
    assert got["optimizer"]["param_groups"] == tree["optimizer"]["param_groups"]
    assert list(got["optimizer"]["state"]) == [0]  # int keys stay ints
    for path in (("model", "w"), ("model", "b"), ("rng",), ("empty",)):
        a, b = got, tree
        for k in path:
            a, b = a[k], b[k]
        assert a.dtype == b.dtype and torch.equal(a, b), path
    got_m = got["optimizer"]["state"][0]
    assert torch.equal(got_m["momentum_buffer"], tree["optimizer"]["state"][0]["momentum_buffer"])
    assert got_m["step"].shape == () and got_m["step"].item() == 4.0
