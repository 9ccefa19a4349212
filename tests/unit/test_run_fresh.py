"""`kdist run --local` on a job whose earlier run left checkpoints: it says it resumed (the
last line) and where from, `--fresh` starts over; and its exit codes are kdist's own (a
failed job is 1 whatever its workers' code, said in the last line). No process is started:
the runner is a stand-in."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

import kdist.api
from kdist.cli import main
from kdist.cli.running import RunSummary
from kdist.local.state import earlier_checkpoints
from tests.unit.helpers import spec_with, write_spec

CHECKPOINT = {"path": "/checkpoints", "volume": {"emptyDir": {}}}


def rank0(event: str, step: int, **more: object) -> str:
    return "[rank 0] " + json.dumps({"event": event, "step": step, "rank": 0, **more})


def test_the_last_line_says_the_run_resumed_from_an_earlier_runs_checkpoint(tmp_path,
                                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = RunSummary("demo")
    s.checkpoints_in(tmp_path / ".kdist" / "demo" / "checkpoints")
    for line in (rank0("resume", 400, checkpoint="step-400"), rank0("done", 400, loss=0.25)):
        s.feed(line)
    assert s.line(0, None).endswith(": 400 steps, final loss 0.25; resumed from step-400 "
                                    "(.kdist/demo/checkpoints; --fresh starts over)")


def test_a_resume_after_a_restart_of_this_run_is_not_an_earlier_runs():
    s = RunSummary("demo")
    for line in (rank0("step", 10, loss=1.0), rank0("resume", 8, checkpoint="step-8"),
                 rank0("done", 20, loss=0.5)):
        s.feed(line)
    assert "resumed" not in s.line(0, None)


def checkpoints(root: Path) -> Path:
    ckpt = root / ".kdist" / "unit-job" / "checkpoints"
    (ckpt / "step-400").mkdir(parents=True)
    (ckpt / "latest").write_text("step-400")
    return ckpt


def test_earlier_checkpoints_are_said_or_removed_with_fresh(tmp_path, capsys):
    ckpt = checkpoints(tmp_path)
    earlier_checkpoints(ckpt, fresh=False)
    assert (ckpt / "step-400").is_dir()
    err = capsys.readouterr().err
    assert f"kdist: {ckpt} has an earlier run's checkpoints (latest step-400)" in err
    assert "(--fresh starts over)" in err
    earlier_checkpoints(ckpt, fresh=True)
    assert not ckpt.exists()
    assert "--fresh: removed the earlier checkpoints" in capsys.readouterr().err
    earlier_checkpoints(ckpt, fresh=False)  # none: nothing to say
    assert capsys.readouterr().err == ""


class StandIn:
    """`kdist.api.run_local` as the CLI calls it: records its options, prints a run."""

    def __init__(self, code: int, interrupted: int | None = None) -> None:
        self.code, self.interrupted = code, interrupted
        self.options: dict[str, object] = {}

    def __call__(self, job, **options):
        self.options = options
        ckpt = Path.cwd() / ".kdist" / job.metadata.name / "checkpoints"
        options["on_checkpoints"](ckpt)
        out = options["stdout"]
        out.write(rank0("resume", 400, checkpoint="step-400") + "\n")
        out.write(rank0("step", 401, loss=0.5) + "\n")
        if self.interrupted is not None:
            options["on_interrupt"](self.interrupted)
        return self.code


def run_cli(tmp_path: Path, monkeypatch, stand_in: StandIn, *flags: str):
    spec = write_spec(tmp_path, spec_with(**{"spec.checkpoint": CHECKPOINT}))
    monkeypatch.setattr(kdist.api, "run_local", stand_in)
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        return CliRunner().invoke(main, ["run", "--local", *flags, str(spec)])
    finally:
        os.chdir(old)


def test_fresh_reaches_the_runner_and_the_summary_names_the_checkpoints(tmp_path,
                                                                       monkeypatch):
    stand_in = StandIn(0)
    res = run_cli(tmp_path, monkeypatch, stand_in, "--fresh")
    assert res.exit_code == 0, res.output
    assert stand_in.options["fresh"] is True
    assert res.output.rstrip().endswith(
        "resumed from step-400 (.kdist/unit-job/checkpoints; --fresh starts over)")
    run_cli(tmp_path, monkeypatch, stand_in)
    assert stand_in.options["fresh"] is False


@pytest.mark.parametrize(("worker", "interrupted", "expected"), [
    (2, None, 1),  # a worker's sys.exit(2) is not kdist's "bad input"
    (137, None, 1),
    (205, None, 1),
    (130, None, 1),  # a node that exited 130 on its own: failed, not interrupted
    (130, signal.SIGINT, 130),
    (143, signal.SIGTERM, 143),
    (0, None, 0),
])
def test_run_exits_with_kdists_own_codes(tmp_path, monkeypatch, worker, interrupted, expected):
    res = run_cli(tmp_path, monkeypatch, StandIn(worker, interrupted))
    assert res.exit_code == expected, res.output
    if expected == 1:
        assert f"failed (exit code {worker})" in res.output, res.output
