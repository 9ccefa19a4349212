"""The goodput ledger annotation is read as cluster text (issue 50): what has kdist's shape is
shown, each part that has not is named in one line, and `status -o json` stays JSON.

Before: an entry that is not an object, a goodput that is text, or a resumed entry without
its seconds ended `kdist status` in a traceback, and a NaN in the annotation made
`status -o json` print `NaN`, which no JSON parser but Python's reads.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kdist.shared.ledger import ANNOTATION
from tests.api.test_verbs import running_job

pytestmark = pytest.mark.timeout(60)

ENTRY = {"cause": "rank 1 (pod demo-1-abcde) exited with code 137: killed by SIGKILL",
         "exitCode": 137, "faultAt": "2025-01-02T03:04:10.000Z",
         "resumedAt": "2025-01-02T03:04:18.500Z", "lastStep": 10, "resumedStep": 0,
         "secondsLost": 8.5, "stepsLost": 10}
LEDGER = {"restarts": [ENTRY], "restartsUsed": 1, "restartsAllowed": 2, "secondsLost": 8.5,
          "stepsLost": 10, "succeeded": False, "goodput": 0.958,
          "asOf": "2025-01-02T03:05:00.000Z"}


def with_entry(entry: Any) -> dict[str, Any]:
    ledger = copy.deepcopy(LEDGER)
    ledger["restarts"].append(entry)
    return ledger


def without(entry: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k != key}


# case -> (the annotation's text, words the note must hold)
CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "an entry that is not an object": (json.dumps(with_entry("restarted")),
                                       ("entry 2", "'restarted' is not an object", "skipped")),
    "an entry that is a list": (json.dumps(with_entry([1, 2])),
                                ("entry 2", "a list is not an object")),
    "goodput is text": (json.dumps(dict(LEDGER, goodput="95%")),
                        ("goodput is '95%'", "not a number", "not shown")),
    "a resumed entry without seconds": (json.dumps(with_entry(without(ENTRY, "secondsLost"))),
                                        ("entry 2", "no secondsLost", "skipped")),
    "NaN seconds lost": (json.dumps(dict(LEDGER, secondsLost=float("nan"))),
                         ("secondsLost is NaN", "not shown")),
    "an infinite goodput": (json.dumps(dict(LEDGER, goodput=float("inf"))),
                            ("goodput is Infinity",)),
    "an entry's NaN seconds": (json.dumps(with_entry(dict(ENTRY, secondsLost=float("nan")))),
                               ("entry 2", "secondsLost is NaN", "skipped")),
    "an entry's cause is a number": (json.dumps(with_entry(dict(ENTRY, cause=7))),
                                     ("entry 2", "cause is 7, not text")),
    "restarts used past any ledger": (json.dumps(dict(LEDGER, restartsUsed=2**62)),
                                      ("restartsUsed is", "not a count up to 100")),
    "not a ledger": (json.dumps(["restarts"]), ("not a ledger", "ignored")),
}


def annotated(api, text: str) -> None:
    job = running_job(api, "demo")
    job["metadata"].setdefault("annotations", {})[ANNOTATION] = text
    api.store.update(job)


def strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the output: not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("case", CASES)
def test_status_shows_what_is_valid_and_names_what_is_not(api, kdist, case):
    text, words = CASES[case]
    annotated(api, text)
    out = kdist("status", "demo")
    assert out.code == 0 and out.crash is None and "Traceback" not in out.stderr, \
        out.describe()
    notes = [line for line in out.stdout.splitlines() if line.startswith("note: ledger")]
    assert len(notes) == 1, out.describe()
    for word in words:
        assert word in notes[0], f"{word!r} not in {notes[0]!r}"
    if case != "not a ledger":  # the valid entry is still shown
        assert "restart 1 at 03:04:10: rank 1 (pod demo-1-abcde) exited with code 137" in \
            out.stdout, out.describe()


@pytest.mark.parametrize("case", CASES)
def test_status_json_stays_json(api, kdist, case):
    text, words = CASES[case]
    annotated(api, text)
    out = kdist("status", "demo", "-o", "json")
    assert out.code == 0 and out.crash is None, out.describe()
    shown = strict(out.stdout)
    ledger = shown["ledger"]
    if case == "not a ledger":
        assert ledger is None
    else:
        assert ledger["restarts"] == [ENTRY], ledger
        assert all(v is None or isinstance(v, (int, float, str, bool, list))
                   for v in ledger.values()), ledger
    assert "note: ledger annotation" in out.stderr and words[0] in out.stderr, out.describe()


def test_a_valid_ledger_is_shown_as_written_without_a_note(api, kdist):
    annotated(api, json.dumps(LEDGER))
    out = kdist("status", "demo")
    assert out.code == 0 and "note:" not in out.stdout + out.stderr, out.describe()
    assert "goodput 95.8%: 1 restart(s) of 2 used, 8.5s and 10 step(s) lost" in out.stdout
    shown = strict(kdist("status", "demo", "-o", "json").stdout)
    assert shown["ledger"] == LEDGER
