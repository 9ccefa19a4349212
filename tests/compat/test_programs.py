"""The happy path: three real third-party programs, unchanged, on 2 nodes x 1 process;
each cold and with warm workers (run in standbys that imported torch: the same outcome)."""

from __future__ import annotations

import pytest
import torch
from compattools import rank_lines, run_kdist, write_job

pytestmark = [pytest.mark.compat, pytest.mark.timeout(150)]


@pytest.fixture(params=[False, True], ids=["cold", "warm"])
def warm(request):
    return request.param


def _job(tmp_path, name: str, warm: bool):
    return write_job(tmp_path, name, **({"distributed": {"warmWorkers": True}} if warm else {}))


def _started_as_asked(run, warm: bool) -> None:
    said = run.matching(r"started from their standbys \(warm\)")
    assert len(said) == (2 if warm else 0), run.text
    assert all("1 of 1 worker(s)" in line.text for line in said), run.text


def test_torchrun_style_ddp_script(tmp_path, warm):
    code, run = run_kdist(_job(tmp_path, "ddp-torchrun", warm), tmp_path, timeout=120)
    assert code == 0, run.text
    _started_as_asked(run, warm)
    for rank in (0, 1):
        lines = rank_lines(run, rank)
        # 2048 samples, batch 32: 32 steps per epoch only when WORLD_SIZE is 2 and RANK differs.
        assert f"[CPU{rank}] Epoch 5 | Batchsize: 32 | Steps: 32" in lines, run.text
        assert not any(line.startswith("Resuming") for line in lines), run.text
    assert "Epoch 5 | Training snapshot saved at snapshot.pt" in rank_lines(run, 0)
    snapshot = torch.load(tmp_path / "snapshot.pt", weights_only=True)
    assert snapshot["EPOCHS_RUN"] == 6


def test_lightning_cli_ddp(tmp_path, warm):
    code, run = run_kdist(_job(tmp_path, "lightning-ddp", warm), tmp_path, timeout=120)
    assert code == 0, run.text
    _started_as_asked(run, warm)
    assert "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2" in rank_lines(run, 0)
    assert "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2" in rank_lines(run, 1)
    assert "All distributed processes registered. Starting with 2 processes" in \
        rank_lines(run, 0)
    assert "`Trainer.fit` stopped: `max_epochs=2` reached." in rank_lines(run, 0), run.text
    # Lightning's own checkpoint of the last epoch, written by global rank 0.
    ckpts = list((tmp_path / "lightning_logs").glob("version_*/checkpoints/epoch=1-step=*.ckpt"))
    assert len(ckpts) == 1, ckpts


def test_accelerate_own_test_script(tmp_path, warm):
    code, run = run_kdist(_job(tmp_path, "accelerate-test-script", warm), tmp_path, timeout=120)
    assert code == 0, run.text
    _started_as_asked(run, warm)
    for rank in (0, 1):
        lines = rank_lines(run, rank)
        assert "Distributed environment: DistributedType.MULTI_CPU  Backend: gloo" in lines, \
            run.text
        assert "Num processes: 2" in lines
        assert f"Process index: {rank}" in lines
        assert "All rng are properly synched." in lines
        assert ("Training yielded the same results on one CPU or distributed setup "
                "with batch split.") in lines
        assert "**Test reinstantiated state**" in lines  # the script's last section
