"""Nothing a worker prints is kdist's word: only the launcher's own lines (its words at the
start of a line, split at ``\\n`` alone) say a restart, a failed rank, its last words
(kdist.shared.records.launcher_said; docs/security.md, "Which log lines kdist trusts")."""

from __future__ import annotations

import os
import threading
import time

import pytest

from kdist.api.localview import LocalView
from kdist.cli.running import RunSummary
from kdist.kube.watch.objects import last_words
from kdist.kube.watch.tracker import Tracker
from kdist.runtime import agent
from kdist.runtime import output as O
from kdist.runtime.output import Output
from kdist.shared.ledger import in_process_line
from kdist.shared.records import parse_record
from tests.unit.test_localview import Recorder, job
from tests.unit.test_runtime_output import BinaryLines

RESTART = "kdist.launch: " + in_process_line(777, 3, "worker rank 1 (node 1) was killed", 137)
# What a worker may print to pass for the launcher's line: anything before it, or a
# character some readers split lines at (str.splitlines) just before it.
FORGED = ["INFO " + RESTART, "[rank 0] " + RESTART, " " + RESTART, "\t" + RESTART,
          "x\r" + RESTART, "x\x0b" + RESTART, "x\x1c" + RESTART, "x\x85" + RESTART,
          "x\u2028" + RESTART, '{"event": "step", "step": 1} ' + RESTART]


def _pod(rank: int) -> dict:
    return {"metadata": {"name": f"unit-job-{rank}-x", "uid": f"u{rank}",
                         "creationTimestamp": "t",
                         "labels": {"kdist.dev/job-name": "unit-job",
                                    "batch.kubernetes.io/job-completion-index": str(rank)}},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "pytorch", "restartCount": 0, "state": {"running": {}}}]}}


def test_a_worker_line_quoting_the_launchers_restart_words_counts_no_restart():
    t = Tracker("unit-job", "d", clock=lambda: 1e9)
    t.pod_event("ADDED", _pod(0))
    for line in FORGED:
        for piece in line.split("\n"):  # the log as the kubelet serves it
            t.log_line("unit-job-0-x", piece, live=True)
    assert t.ledger.restarts == [] and t.state.ledger is None
    assert t.state.ranks[0].restarts == 0
    t.log_line("unit-job-0-x", RESTART, live=True)  # the launcher's own: a restart
    assert len(t.ledger.restarts) == 1 and t.state.ranks[0].restarts == 777


def test_only_a_line_that_starts_with_the_launchers_words_is_its_own():
    from kdist.shared.records import launcher_said

    assert launcher_said(RESTART) == RESTART.removeprefix("kdist.launch: ")
    for line in FORGED:
        assert launcher_said(line) is None, line


def test_a_termination_messages_last_words_are_kdists_only_at_a_lines_start():
    said = "kdist.launch: worker rank 1 (node 1) exited with code 1; exiting 1: failed"
    assert last_words(f"{said}\nlater output") == said
    for forged in ("x\x0bkdist.launch: forged", "x\rkdist.launch: forged",
                   "x\u2028kdist.launch: forged", "  kdist.launch: forged"):
        assert last_words(f"{said}\n{forged}") != "kdist.launch: forged", forged


def test_a_local_runs_worker_line_is_a_workers_whatever_it_prints():
    seen = Recorder()
    view = LocalView(job(), seen)
    view.attempt(0)
    view.write("".join(f"[rank 1] {line}\n" for line in FORGED))
    assert view.tracker.ledger.restarts == [] and view.state.ranks[0].restarts == 0
    view.write(f"[node 1] {RESTART}\n")  # the launcher's own, as the local runner passes it
    assert len(view.tracker.ledger.restarts) == 1


def test_a_local_runs_failure_is_the_launchers_word_not_a_workers():
    failed = "kdist.launch: worker rank 1 (node 0, local rank 1, pid 9) exited with code 1; " \
             "exiting 1: failed"
    s = RunSummary("demo")
    s.feed(f"[rank 0] {failed.replace('rank 1', 'rank 5')}")
    s.feed(f"[rank 0] [node 0] {failed.replace('rank 1', 'rank 6')}")
    assert s.failure is None
    s.feed(f"[node 0] {failed}")
    assert s.failure is not None and s.failure[1].startswith("rank 1 exited with code 1")


@pytest.fixture
def pod_output(tmp_path):
    out = BinaryLines()
    o = Output(tmp_path / "pipes", [3], prefix=False, out=out).start()
    w = os.open(o.pipe(0), os.O_WRONLY)
    yield o, out, w
    os.close(w)
    o.stop()


def test_the_launcher_puts_the_rank_before_a_worker_line_that_starts_as_its_own(pod_output):
    o, out, w = pod_output
    os.write(w, RESTART.encode() + b"\n")
    os.write(w, RESTART.encode() + b"\r\n")  # a CRLF line end
    os.write(w, b"\r10%\r" + RESTART.encode() + b"\n")  # a redraw whose last state is it
    os.write(w, b"kdist.launch:no space\n")
    os.write(w, b"a worker's own line\n")
    lines = out.wait_for(5)
    quoted = b"[rank 3] " + RESTART.encode()
    assert lines == [quoted, quoted, quoted, b"[rank 3] kdist.launch:no space",
                     b"a worker's own line"]


def test_a_long_worker_line_that_starts_as_the_launchers_gets_the_rank_too(pod_output):
    o, out, w = pod_output
    long = RESTART.encode() + b"x" * (O.MAX_LINE * 2)
    os.write(w, long + b"\n")
    assert out.wait_for(1) == [b"[rank 3] " + long]


def test_the_launchers_line_never_lands_inside_a_workers_long_line(pod_output, capsys):
    """A worker passing on a long line when the launcher speaks: the launcher's line comes
    after a line end, and the rest of the worker's line, now at a line's start, is read as
    any worker line (it cannot pass for the launcher's)."""
    o, out, w = pod_output
    os.write(w, b"x" * (O.MAX_LINE + 10))
    deadline = time.monotonic() + 10
    while o._streaming is None:  # the long line is being passed on
        assert time.monotonic() < deadline
        time.sleep(0.01)
    agent.say("a line of the launcher's own")
    assert out.wait_for(1) == [b"x" * (O.MAX_LINE + 10)]  # ended before the launcher spoke
    assert capsys.readouterr().out == "kdist.launch: a line of the launcher's own\n"
    os.write(w, RESTART.encode() + b"\n")  # the rest of the worker's line
    assert out.wait_for(2)[1] == b"[rank 3] " + RESTART.encode()


def test_a_launcher_line_quoting_a_workers_words_is_one_line(capsys):
    agent.say("worker rank 1 failed: boom\n" + RESTART + "\r" + RESTART)
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and said.startswith("kdist.launch: worker rank 1 failed")


def test_a_line_no_reader_can_parse_is_skipped_not_raised():
    deep = '{"event": ' + "[" * 100_000
    assert parse_record(deep) is None
    assert parse_record('[rank 0] {"event": ' + "[" * 100_000 + "]" * 100_000 + "}") is None
    s = RunSummary("demo")
    s.feed("[rank 0] " + deep + "]" * 100_000 + "}")
    assert s.step is None


def test_a_worker_writing_while_the_launcher_speaks_loses_nothing(pod_output, capsys):
    o, out, w = pod_output
    stop = threading.Event()

    def talk():
        while not stop.is_set():
            agent.say("tick")

    speaker = threading.Thread(target=talk)
    speaker.start()
    try:
        for i in range(200):
            os.write(w, b"line %d\n" % i)
        lines = out.wait_for(200)
    finally:
        stop.set()
        speaker.join()
    assert lines == [b"line %d" % i for i in range(200)]
    assert set(capsys.readouterr().out.splitlines()) == {"kdist.launch: tick"}
