"""spec.runtime shipped: real launchers started by the pods' bootstrap from the zip alone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from disttools import TINY, final_state, run_job

from kdist.rendering import runtime_ship
from kdist.shared import env as E

SHOW_ORIGIN = ("import kdist, kdist.workloads.common as c, os; "
               "print('origin', os.environ['RANK'], kdist.__file__, c.__file__)")


@pytest.fixture
def shipped(tmp_path: Path) -> tuple[list[str], dict[str, str], Path]:
    """The command a shipped pod starts with, and the zip where its volume would be."""
    runtime = runtime_ship.built()
    (tmp_path / E.RUNTIME_ZIP).write_bytes(runtime.data)
    boot = runtime_ship.boot_command(runtime)
    return [sys.executable, *boot[1:]], {E.RUNTIME_DIR: str(tmp_path)}, tmp_path


@pytest.mark.timeout(180)
@pytest.mark.parametrize("warm", ["0", "1"], ids=["cold", "warm"])
def test_every_worker_runs_kdist_from_the_shipped_zip(shipped, warm):
    """Warm too: the standbys start from the zip's sitehook, their workers import from it."""
    launch, env, where = shipped
    # Started where a pod starts (its /workspace), not in this checkout, whose kdist/
    # `python -c` would find first.
    run = run_job(["--", "python", "-c", SHOW_ORIGIN], nodes=2, procs=2, launch=launch,
                  cwd=where, KDIST_WARM_WORKERS=warm, **env)
    assert run.code == 0, run.text
    warm_lines = [line for line in run.lines if "2 of 2 worker(s) of node" in line]
    assert len(warm_lines) == (2 if warm == "1" else 0), run.text
    origins = sorted(line.split("origin ", 1)[1] for line in run.lines if "origin " in line)
    zip_ = str(where / E.RUNTIME_ZIP)
    assert [o.split()[0] for o in origins] == ["0", "1", "2", "3"], run.text
    for o in origins:
        _, init, common = o.split()
        assert init == f"{zip_}/kdist/__init__.py"
        assert common == f"{zip_}/kdist/workloads/common.py"


@pytest.mark.timeout(180)
def test_ddp_from_the_shipped_runtime_resumes_after_a_sigkill(shipped, tmp_path):
    """kdist's DDP workload, a rank SIGKILLed at step 10, one restart: it resumes from the
    step-8 checkpoint and ends at step 20, as from an image with kdist installed."""
    launch, env, _ = shipped
    ckpt = tmp_path / "ckpt"
    argv = ["--module", "kdist.workloads.ddp", "--", *TINY, "--max-steps", "20",
            "--checkpoint-every", "4", "--log-every", "2", "--batch-size", "16",
            "--checkpoint-dir", str(ckpt)]
    run = run_job(argv, nodes=2, launch=launch, cwd=tmp_path, KDIST_FAULT_KILL_AT="1:10",
                  KDIST_MAX_RESTARTS="1", **env)
    assert run.code == 0, run.text
    assert sorted((e["rank"], e["step"]) for e in run.events("resume")) == [(0, 8), (1, 8)]
    assert sorted((e["rank"], e["step"]) for e in run.events("done")) == [(0, 20), (1, 20)]
    assert (ckpt / "latest").read_text().strip() == "step-20"
    assert final_state(ckpt)["model"]
