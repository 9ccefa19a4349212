"""The goodput ledger read back from a job's annotation (``kdist.dev/ledger``): what has the
shape kdist writes (``kdist.shared.ledger``, `Ledger.summary`) is kept, the rest named.

The annotation is anyone's to edit (kubectl, a controller, whoever may patch the job),
so it is cluster text like any other: an entry that is not an object, a goodput that
is text, a resumed entry without its seconds crashed `kdist status`, and a NaN made
`status -o json` invalid JSON. Here each entry and each total is checked against what
`summary` writes; an entry that is not is skipped, a total that is not is left unsaid
(None), and each is named in one line (`Kept.problems`) for status to show.

Standard library only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from kdist.shared import jsonread
from kdist.shared.ledger import ANNOTATION, MAX_ENTRIES

#: The annotation's longest text read (a full ledger of MAX_ENTRIES is far shorter).
MAX_TEXT = 64_000
WHERE = f"ledger annotation ({ANNOTATION})"


class Kept(NamedTuple):
    """The ledger a watch kept (None when there is none, or none kdist can read), and one
    line per part of the annotation that was not kdist's shape."""

    ledger: dict[str, Any] | None
    problems: list[str]


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63


def _seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value) and value >= 0


def _share(value: Any) -> bool:
    return _seconds(value) and value <= 1


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _or_none(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


# field -> (its check, what it must be: said when it is not)
ENTRY: dict[str, tuple[Callable[[Any], bool], str]] = {
    "cause": (_text, "text"),
    "exitCode": (_int, "an integer"),
    "faultAt": (_or_none(_text), "a time"),
    "resumedAt": (_or_none(_text), "a time"),
    "lastStep": (_or_none(_count), "a step"),
    "resumedStep": (_or_none(_count), "a step"),
    "secondsLost": (_or_none(_seconds), "a number of seconds"),
    "stepsLost": (_or_none(_count), "a count"),
    "spare": (_text, "text"),
    "shrank": (_text, "text"),
    "resumedFrom": (_text, "text"),
    "grew": (_text, "text"),
}
# Said only where it holds: a restart a warm spare ended, after which the gang shrank or
# grew back, or whose resume line said whence
OPTIONAL = frozenset({"spare", "shrank", "resumedFrom", "grew"})
TOTALS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "restartsUsed": (lambda v: _count(v) and v <= MAX_ENTRIES, f"a count up to {MAX_ENTRIES}"),
    "restartsAllowed": (_or_none(_count), "a count"),
    "secondsLost": (_seconds, "a number of seconds"),
    "stepsLost": (_count, "a count"),
    "succeeded": (lambda v: isinstance(v, bool), "true or false"),
    "goodput": (_or_none(_share), "a number from 0 to 1"),
    "asOf": (_or_none(_text), "a time"),
}


def read(text: str | None) -> Kept:
    """The annotation's ledger as kdist wrote it, and what of it was not."""
    if not text:
        return Kept(None, [])
    try:
        value = jsonread.loads(text, limit=MAX_TEXT)
    except ValueError as e:
        return Kept(None, [f"{WHERE}: not JSON kdist reads ({e}); ignored"])
    if not isinstance(value, dict) or not isinstance(value.get("restarts"), list):
        return Kept(None, [f"{WHERE}: not a ledger (an object with a list of restarts); "
                           "ignored"])
    problems: list[str] = []
    entries = []
    for i, entry in enumerate(value["restarts"][:MAX_ENTRIES], 1):
        why = _entry_problem(entry)
        if why:
            problems.append(f"{WHERE}: entry {i}: {why}; skipped")
        else:
            entries.append({k: entry.get(k) for k in ENTRY if k in entry or k not in OPTIONAL})
    if len(value["restarts"]) > MAX_ENTRIES:
        problems.append(f"{WHERE}: more than {MAX_ENTRIES} entries; the rest skipped")
    ledger: dict[str, Any] = {"restarts": entries}
    for key, (check, must) in TOTALS.items():
        if key in value and not check(value[key]):
            problems.append(f"{WHERE}: {key} is {_shown(value[key])}, not {must}; not shown")
            ledger[key] = None
        else:
            ledger[key] = value.get(key)
    return Kept(ledger, problems)


def _entry_problem(entry: Any) -> str:
    if not isinstance(entry, dict):
        return f"{_shown(entry)} is not an object"
    for key, (check, must) in ENTRY.items():
        if key in entry and not check(entry[key]):
            return f"{key} is {_shown(entry[key])}, not {must}"
    if "cause" not in entry:
        return "no cause"
    if entry.get("resumedAt") is not None and entry.get("secondsLost") is None:
        return "resumed, but no secondsLost"
    return ""


def _shown(value: Any) -> str:
    """`value` briefly, as JSON spells it."""
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    if isinstance(value, float) and not math.isfinite(value):
        return {"nan": "NaN", "inf": "Infinity"}.get(str(value), "-Infinity")
    text = json.dumps(value) if value is None or isinstance(value, bool) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
