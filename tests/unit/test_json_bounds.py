"""What a worker prints is read within bounds (issue 50): a line of 100,000 `[` after
`{"event"` raised RecursionError in every reader of step lines, which killed a local
run's line reader (the node then blocked on a full pipe)."""

from __future__ import annotations

import json
from pathlib import Path

from kdist.cli.running import RunSummary
from kdist.local.ledger import LocalLedger
from kdist.runtime.workers import Worker
from kdist.shared import records

DEEP = '{"event": "step", "step": 3, "x": ' + "[" * 100_000


def test_a_local_runs_readers_pass_over_a_line_too_deep_to_read():
    summary = RunSummary("demo")
    summary.feed("[rank 0] " + DEEP)
    summary.feed("[rank 0] " + json.dumps({"event": "step", "step": 2, "loss": 0.5}))
    assert (summary.step, summary.loss) == (2, 0.5)
    ledger = LocalLedger(max_restarts=1, clock=lambda: 1.0)
    ledger.line(0, "[default0]:" + DEEP)
    ledger.line(0, '[default0]:{"event": "step", "step": 4}')
    assert ledger._step == 4
    assert records.parse_record("[default0]:" + DEEP) is None


def test_a_workers_error_file_too_deep_to_read_is_no_message(tmp_path: Path):
    error_file = tmp_path / "error.json"
    error_file.write_text('{"message": ' + "[" * 100_000)
    assert Worker(0, 0, error_file).error_message() is None
    error_file.write_text(json.dumps({"message": "boom"}))
    assert Worker(0, 0, error_file).error_message() == "boom"
