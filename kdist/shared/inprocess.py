"""The one line a launcher says when it restarts its workers in process, and reading it back.

No pod or container shows such a restart (``kdist.launch._again``): the watch
(``kdist.kube.tracker``) and ``kdist run --local`` learn of it from this line in the
pod's log, so its form is kept here, for both sides.
"""

from __future__ import annotations

import re

IN_PROCESS = re.compile(
    r"kdist\.launch: restarting this node's workers \(restart (?P<count>\d+) of "
    r"(?P<limit>\d+), in process\): (?P<why>.*); exit (?P<code>\d+)\s*$")


def line(count: int, limit: int, why: str, code: int) -> str:
    """What the launcher says (after its ``kdist.launch: ``)."""
    return f"restarting this node's workers (restart {count} of {limit}, in process): " \
           f"{why}; exit {code}"
