"""Assertions shared by the fake-API tests: exit code plus one clean error line, and calls."""

from __future__ import annotations

import json
import re

from tests.api.runner import Outcome


def error_line(outcome: Outcome, code: int, *contains: str) -> str:
    """Assert `outcome` exited `code` with exactly one `error:` line and no traceback;
    return that line. Each of `contains` must appear in it (case-insensitive)."""
    detail = outcome.describe()
    assert outcome.crash is None, f"an exception escaped kdist:\n{detail}"
    assert "Traceback" not in outcome.stderr, f"a traceback was printed:\n{detail}"
    assert outcome.code == code, f"exit {outcome.code}, want {code}:\n{detail}"
    lines = outcome.error_lines
    assert len(lines) == 1, f"want exactly one `error:` line, got {len(lines)}:\n{detail}"
    assert len(outcome.stderr.strip().splitlines()) <= 3, f"stderr is not short:\n{detail}"
    for text in contains:
        assert text.lower() in lines[0].lower(), f"{text!r} not in the error line:\n{detail}"
    return lines[0]


def names_value(line: str, value: str) -> bool:
    """Whether an error line names `value` recognisably: quoted (repr, ascii, JSON, '...',
    "...", `...`), or bare when it is a word that cannot be mistaken for the sentence around it;
    the empty string by saying "empty"."""
    if value == "" and "empty" in line.lower():
        return True
    forms = {repr(value), ascii(value), json.dumps(value)}
    if value.isprintable():
        forms |= {f"'{value}'", f'"{value}"', f"`{value}`"}
    if any(f in line for f in forms):
        return True
    bare = (value.isprintable() and len(value) >= 2 and any(c.isalnum() for c in value)
            and " " not in value)
    return bare and re.search(rf"(?<![\w.-]){re.escape(value)}(?![\w.-])", line) is not None


def assert_calls(outcome: Outcome, expected: list[tuple[str, str]]) -> None:
    """The exact (method, path) sequence, with a consecutive repeat of the same GET (a
    list followed by its watch, or a re-watch) counted once."""
    got = collapse(outcome.calls)
    assert got == expected, (
        "request sequence differs\n  want:\n" + "\n".join(f"    {m} {p}" for m, p in expected)
        + "\n  got (repeats collapsed):\n" + "\n".join(f"    {m} {p}" for m, p in got)
        + f"\n{outcome.describe()}")


def collapse(calls: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for call in calls:
        if not (out and call == out[-1] and call[0] == "GET"):
            out.append(call)
    return out
