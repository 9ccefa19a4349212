"""What a workload's JSON log line says, and when an RFC 3339 timestamp is: pure readers
the watch (``kdist.kube``) and the local runner (``kdist.local``) share."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kdist.shared import jsonread
from kdist.shared.limits import MAX_EVENT_BYTES


def parse_record(line: str) -> dict[str, Any] | None:
    """A workload's JSON log line (`{"event": ...}`, docs/DESIGN.md), else None.

    A prefix before the JSON object (a launcher's `[default0]:`) is tolerated.
    """
    text = line.strip()
    start = text.find('{"event"')
    if start < 0:
        return None
    try:
        record = jsonread.loads(text[start:], limit=MAX_EVENT_BYTES)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("event"), str) else None


def parse_time(stamp: str | None) -> float | None:
    """An RFC 3339 timestamp (an API object's) as epoch seconds."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
