"""What a workload's JSON log line says, whether a log line is the launcher's own, and when
an RFC 3339 timestamp is: pure readers the watch (``kdist.kube``) and the local runner
(``kdist.local``) share.

Which lines are trusted (docs/security.md): a line of a container's log is the
launcher's own only when it *starts* with `LAUNCHER` (the log split on ``\\n`` alone,
as the kubelet and the launcher split it). The launcher writes every line of its
container's stream: the workers' output reaches it only through the launcher
(``kdist.runtime.output``), which begins no worker line with `LAUNCHER` (it puts the
rank before any that would), and the launcher's own output is out of the workers'
reach (``kdist.runtime.output.seal``). A step line is a worker's by design.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kdist.shared import jsonread
from kdist.shared.limits import MAX_EVENT_BYTES

#: What begins every line the launcher writes itself (``kdist.runtime.agent.say``).
LAUNCHER = "kdist.launch: "


def launcher_said(line: str) -> str | None:
    """What the launcher said, when `line` (one line of a container's log, split on
    ``\\n`` alone) is its own: it starts with `LAUNCHER`; any prefix makes it a worker's."""
    return line[len(LAUNCHER):] if line.startswith(LAUNCHER) else None


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
