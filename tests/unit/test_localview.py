"""`kdist run --local`'s live table: the local runner's prefixed lines as a job's state
(kdist.api.localview), and the CLI's choice of table or raw lines."""

from __future__ import annotations

import io
import json

from click.testing import CliRunner

from kdist.api.localview import LocalView
from kdist.cli import main
from kdist.cli.progress import LiveDisplay, make_local_display
from kdist.spec import validate_job


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def start(self, state): self.events.append(("start", state.name))
    def update(self, state): self.events.append(("update", None))
    def tick(self, state): pass
    def warning(self, text): self.events.append(("warning", text))
    def log(self, rank, line): self.events.append(("log", (rank, line)))
    def message(self, text): self.events.append(("message", text))
    def stop(self): self.events.append(("stop", None))


def job(nodes: int = 2, procs: int = 2):
    return validate_job({
        "apiVersion": "kdist/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "lv"},
        "spec": {"image": "x:1", "nodes": nodes, "procsPerNode": procs,
                 "workload": {"module": "kdist.workloads.ddp", "args": ["--max-steps", "20"]},
                 "distributed": {"maxRestarts": 1}}})


def step(rank: int, n: int, loss: float) -> str:
    return json.dumps({"event": "step", "step": n, "loss": loss, "rank": rank,
                       "samples_per_s": 100.0, "steps_per_s": 2.0})


def test_lines_become_rows_per_node_with_steps_restarts_and_the_end():
    seen = Recorder()
    view = LocalView(job(), seen)
    view.attempt(0)
    view.write(f"[node 1] launcher up\n[rank 0] {step(0, 10, 0.5)}\n[rank 3] {step(3, 10, 0.6)}"
               "\n[rank 2] partial")
    s = view.state
    assert (s.ranks[0].step, s.ranks[0].loss, s.ranks[1].loss) == (10, 0.5, 0.6)
    assert s.max_steps == 20 and s.phase == "Running"
    view.attempt(1)  # a whole-job restart: every row counts it
    assert [r.restarts for r in s.ranks.values()] == [1, 1]
    view.write(" line\n")  # the partial line is whole once its end arrives
    view.finish(0)
    assert s.outcome == "Succeeded" and [r.phase for r in s.ranks.values()] == ["Succeeded"] * 2
    messages = [e[1] for e in seen.events if e[0] == "message"]
    assert messages == ["[node 1] launcher up", f"[rank 0] {step(0, 10, 0.5)}",
                        f"[rank 3] {step(3, 10, 0.6)}", "[rank 2] partial line"]
    assert seen.events[0] == ("start", "lv") and seen.events[-1] == ("stop", None)


def test_a_failed_run_fails_the_rows_that_did_not_finish():
    view = LocalView(job(procs=1), Recorder())
    view.attempt(0)
    view.write('[rank 0] {"event": "done", "step": 20}\n')
    view.finish(1)
    s = view.state
    assert s.outcome == "Failed"
    assert [r.phase for r in s.ranks.values()] == ["Succeeded", "Failed"]
    assert s.first_failure().rank == 1


def test_an_interrupted_run_shows_its_rows_interrupted_not_failed():
    from kdist.cli.progress import _phase_text

    view = LocalView(job(procs=1), Recorder())
    view.attempt(0)
    view.write('[rank 0] {"event": "done", "step": 20}\n')
    view.finish(130, interrupted=True)
    s = view.state
    assert s.outcome == "Interrupted"
    assert [_phase_text(r, s) for r in s.ranks.values()] == ["Succeeded", "Interrupted"]


def test_a_run_refused_before_it_started_shows_nothing():
    seen = Recorder()
    LocalView(job(), seen).finish(2)
    assert seen.events == []


def test_the_table_on_a_terminal_and_raw_lines_otherwise(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdout", Tty())
    assert isinstance(make_local_display(raw=False), LiveDisplay)
    assert make_local_display(raw=True) is None
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert make_local_display(raw=False) is None


def test_run_local_takes_raw():
    result = CliRunner().invoke(main, ["run", "--help"])
    assert "--raw" in result.output
    result = CliRunner().invoke(main, ["run", "--raw", "job.yaml"])
    assert result.exit_code == 2 and "needs --local" in result.output
