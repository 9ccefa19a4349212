"""DDP resumes from a surviving rank's memory (issue 54, slice 3): real launchers and gloo
workers, checkpoints only at the end, so any resume from a checkpoint would start over.

- A worker SIGKILLed: the launchers restart their workers in process (pods restarting in
  place keep /dev/shm) and the gang goes on from the step the survivor holds.
- A frozen node's rank taken by a warm spare, whose new worker holds nothing: rank 0
  sends it its state; no step is lost.

Both end with the parameters an uninterrupted run reaches, exactly.

``python tests/dist/test_memory_resume.py [RUNS]`` measures the spare drill's "frozen ->
first resumed step" and steps lost, from memory and from a checkpoint every 5 steps
(``--no-memory-copy``), and the copy's cost in steps per second (docs/restarts.md).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from disttools import TINY, final_state, free_port, node_env, run_envs, run_job  # noqa: E402
from test_spares import SPARES, drill, ledger_of, start  # noqa: E402

STEPS = 40
NEVER = "1000"  # a checkpoint interval larger than the steps run
ARGS = [*TINY, "--max-steps", str(STEPS), "--log-every", "1", "--checkpoint-every", NEVER]
ARGV = ["--module", "kdist.workloads.ddp", "--", *ARGS, "--step-delay", "0.1"]
_PREFIX = re.compile(r"\[rank (\d+)\] (\{.*)$")


def events(lines: list[str], kind: str) -> list[dict]:
    found = []
    for line in lines:
        m = _PREFIX.match(line)
        if m and f'"event": "{kind}"' in m.group(2):
            found.append(json.loads(m.group(2)))
    return found


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    ckpt = tmp_path_factory.mktemp("uninterrupted")
    run = run_job(["--module", "kdist.workloads.ddp", "--", *ARGS, "--checkpoint-dir",
                   str(ckpt)], nodes=2)
    assert run.code == 0, run.text
    return final_state(ckpt)


def assert_same_params(ckpt: Path, uninterrupted: dict) -> None:
    state = final_state(ckpt)
    for name, value in uninterrupted["model"].items():
        assert torch.equal(state["model"][name], value), name


@pytest.mark.timeout(200)
def test_a_killed_worker_restarted_in_process_resumes_from_memory(tmp_path, uninterrupted):
    port = free_port()
    envs = []
    for node in range(2):
        directory = tmp_path / f"pod-{node}"
        directory.mkdir()
        envs.append(node_env(2, 1, node, port, KDIST_RESTART_DIR=str(directory),
                             KDIST_MAX_RESTARTS="1", KDIST_FAULT_KILL_AT="1:10",
                             KDIST_CHECKPOINT_DIR=str(tmp_path / "ckpt")))
    run = run_envs(["--module", "kdist.workloads.ddp", "--", *ARGS, "--step-delay", "0.05"],
                   envs)
    assert run.code == 0, run.text
    assert "(restart 1 of 1, in process)" in run.text, run.text
    resumed = run.events("resume")
    # Rank 1 died right after step 10; rank 0 held step 10 (it kept it before its next
    # all-reduce found the peer gone): both go on from step 10, none from a checkpoint.
    assert sorted((e["rank"], e["step"]) for e in resumed) == [(0, 10), (1, 10)], run.text
    assert all(e["source"] == f"memory of rank {e['memory_rank']}, step 10" for e in resumed)
    said = [line for line in run.lines if "kdist.workloads.memory: resuming from the memory "
            f"of rank {resumed[0]['memory_rank']}, step 10 (newest checkpoint: none;" in line]
    assert len(said) == 1 and said[0].endswith("at most the step in flight is lost"), run.text
    assert not list((tmp_path / "ckpt").glob("step-10")), "no checkpoint but the last"
    assert sorted(e["rank"] for e in run.events("done")) == [0, 1], run.text
    assert_same_params(tmp_path / "ckpt", uninterrupted)


@pytest.mark.timeout(400)
def test_a_spare_resumes_from_rank_0s_memory_losing_no_step(tmp_path, uninterrupted):
    proc, _ = start(tmp_path, SPARES, argv=ARGV)
    lines, resumed_s = drill(proc, thaw_after='"event": "resume"')
    text = "\n".join(lines)
    assert proc.returncode == 0, text
    assert "[node 2] kdist.launch: spare in slot 2 takes node rank 1" in text, text
    assert resumed_s is not None, text
    first = next(i for i, line in enumerate(lines) if '"event": "resume"' in line)
    last = max(e["step"] for e in events(lines[:first], "step") if e["rank"] == 0)
    resumed = events(lines, "resume")
    # The spare's new worker held nothing: rank 0 sent it the newest step it had done.
    assert sorted((e["rank"], e["step"], e["memory_rank"]) for e in resumed) == \
        [(0, last, 0), (1, last, 0)], text  # 0 steps lost
    assert f"resuming from the memory of rank 0, step {last} (newest checkpoint: none; " \
        f"memory: rank 0 step {last}, rank 1 none)" in text, text
    assert sorted(d["rank"] for d in events(lines, "done")) == [0, 1], text
    assert_same_params(tmp_path / "ckpt", uninterrupted)
    restarts = ledger_of(lines)["restarts"]
    assert len(restarts) == 1 and "node 1 lost (silent for" in restarts[0]["cause"], restarts


def measure(runs: int, drills: bool = True) -> None:
    """Medians of `runs`: the spare drill from memory and from a checkpoint every 5 steps
    (the freeze comes after step 8; frozen -> first resumed step, steps lost), then steps/s
    with and without the copy."""
    took: dict[str, list[tuple[float, int]]] = {"memory": [], "checkpoint every 5": []}
    for i in range(runs if drills else 0):
        for name in sorted(took, reverse=i % 2 == 1):  # each first in turn
            flags = [] if name == "memory" else ["--no-memory-copy", "--checkpoint-every",
                                                 "5"]
            with tempfile.TemporaryDirectory() as tmp:
                proc, _ = start(Path(tmp), SPARES, argv=[*ARGV, *flags])
                lines, seconds = drill(proc, thaw_after='"event": "resume"')
            if seconds is None:
                print(f"{name}: no resume", flush=True)
                continue
            first = next(i for i, line in enumerate(lines) if '"event": "resume"' in line)
            last = max(e["step"] for e in events(lines[:first], "step") if e["rank"] == 0)
            took[name].append((seconds, last - events(lines, "resume")[0]["step"]))
    for name, seen in took.items():
        if seen:
            print(f"spare drill, {name}: frozen -> resumed median "
                  f"{statistics.median(s for s, _ in seen):.1f} s "
                  f"({', '.join(f'{s:.1f}' for s, _ in seen)}), steps lost "
                  f"{[lost for _, lost in seen]}", flush=True)
    rates: dict[str, list[float]] = {"copy": [], "--no-memory-copy": []}
    for _ in range(runs):
        for name in rates:
            flags = ["--no-memory-copy"] if name != "copy" else []
            run = run_job(["--module", "kdist.workloads.ddp", "--", *TINY, "--max-steps",
                           "600", "--log-every", "100", "--checkpoint-every", "0", *flags],
                          nodes=2)
            steps = [e["steps_per_s"] for e in run.events("step") if e["rank"] == 0][1:]
            rates[name].append(statistics.median(steps))
    for name, seen in rates.items():
        print(f"tiny model, 2 ranks, {name}: median {statistics.median(seen):.1f} steps/s "
              f"({', '.join(f'{r:.1f}' for r in seen)})", flush=True)


if __name__ == "__main__":  # [RUNS] [rate: steps/s only]
    measure(int(sys.argv[1]) if len(sys.argv) > 1 else 3, "rate" not in sys.argv[2:])
