"""The last line of `kdist run --local`: read from rank 0's step lines as they pass."""

from __future__ import annotations

import io
import json
import signal

from kdist.cli.running import RunSummary, Tee


def step(event: str, n: int, loss: float | None = None, rank: int = 0) -> str:
    record = {"event": event, "step": n, "rank": rank}
    if loss is not None:
        record["loss"] = loss
    return f"[rank {rank}] {json.dumps(record)}\n"


def test_succeeded_failed_interrupted():
    s = RunSummary("demo")
    for line in (step("step", 10, 0.9), step("step", 20, 0.5), step("step", 30, 9.0, rank=1),
                 step("done", 20, 0.4)):
        s.feed(line.rstrip("\n"))
    assert s.line(0, None).startswith("local run demo succeeded in ")
    assert s.line(0, None).endswith(": 20 steps, final loss 0.4")
    assert " failed (exit code 1) after " in s.line(1, None)
    assert s.line(1, None).endswith(": at step 20, last loss 0.4")
    stopped = s.line(130, signal.SIGINT)
    assert stopped.startswith("local run demo interrupted (Ctrl-C) after ")
    assert "fail" not in stopped
    assert "interrupted (SIGTERM)" in s.line(143, signal.SIGTERM)


def test_no_step_lines_no_steps():
    s = RunSummary("script")
    s.feed("[rank 0] hello")
    s.feed('[rank 0] {"event": "step", "step": true}')
    assert s.line(0, None).split(" in ")[0] == "local run script succeeded"
    assert ":" not in s.line(0, None).split(" in ", 1)[1]


class Binary(io.BytesIO):
    pass


def test_tee_passes_bytes_as_written_and_reads_the_lines():
    raw = Binary()
    text = io.TextIOWrapper(raw, encoding="utf-8")
    s = RunSummary("demo")
    tee = Tee(s, text)
    data = step("step", 5, 0.25).encode()
    tee.buffer.write(b"[rank 0] bad \xff\n" + data[:7])  # a line in pieces
    tee.buffer.write(data[7:])
    tee.flush()
    assert raw.getvalue() == b"[rank 0] bad \xff\n" + data
    assert (s.step, s.loss) == (5, 0.25)


def test_a_run_that_restarted_says_its_ledger_before_the_last_line(capsys):
    from kdist.shared.ledger import Ledger

    led = Ledger()
    led.failed("node 1", 137, None, now=1796439610.0, last_step=12)
    led.stepped(8, now=1796439616.5, resumed=True)
    s = RunSummary("demo")
    s.feed(step("step", 20, 0.5).rstrip("\n"))
    s.say(0, None)  # no restart: the one line
    assert len(capsys.readouterr().out.splitlines()) == 1
    s.kept(led.summary(2, started=1796439600.0, now=1796439700.0, succeeded=True))
    s.say(0, None)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("restart 1 at 03:00:10: node 1 exited with code 137: killed by")
    assert out[0].endswith("back 6.5s later, 4 step(s) lost")
    assert out[1] == "goodput 93.5%: 1 restart(s) of 2 used, 6.5s and 4 step(s) lost"
    assert out[2].startswith("local run demo succeeded in ")
    s.say(137, None)  # a failed run says it all on stderr
    assert capsys.readouterr().err.splitlines()[0].startswith("restart 1 at ")
