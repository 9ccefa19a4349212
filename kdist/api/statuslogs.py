"""The logs `status` reads for each rank's step and loss: a bounded number, a few at once.

A 1,000-node job's status read every rank's log one after another (1,000 requests of up
to 2,000 lines each, seconds of wall time) to fill in columns few people read at that
width. Now: at most `LOG_NODES` logs, the failed ranks' first (their lines say why), then
the lowest ranks; `STATUS_LOG_READERS` at a time. The other ranks' step and loss stay
unknown (blank), and the state's notes say how many logs were read.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kdist.shared.limits import LOG_NODES, STATUS_LOG_READERS


def ranks_to_read(tracker: Any, limit: int = LOG_NODES) -> list[tuple[int, str]]:
    """(rank, pod) of the logs worth reading: started pods, the failed ones first, then by
    rank; at most `limit`."""
    started = [(r.rank, r.pod) for r in tracker.state.ranks.values()
               if r.pod and tracker.pod_started(r.pod)]
    failed = {r.rank for r in tracker.state.ranks.values()
              if r.phase == "Failed" or r.exit_code not in (None, 0)}
    started.sort(key=lambda rp: (rp[0] not in failed, rp[0]))
    return started[:limit]


def read_step_logs(cluster: Any, tracker: Any, namespace: str, tail: int) -> None:
    """Feed `tracker` the last `tail` lines of the chosen ranks' logs (`ranks_to_read`).

    The reads run in threads; the tracker is fed here, in the caller's thread, in rank
    order. A log that cannot be read leaves that rank's step and loss unknown."""
    from kdist.shared.errors import KdistError

    chosen = ranks_to_read(tracker)

    def read(pod: str) -> list[str] | None:
        try:
            return list(cluster.read_log(pod, namespace, tail=tail,
                                         container=tracker.container))
        except KdistError:
            return None

    with ThreadPoolExecutor(max_workers=STATUS_LOG_READERS,
                            thread_name_prefix="kdist-status-log") as pool:
        tails = list(pool.map(read, [pod for _, pod in chosen]))
    for (_, pod), lines in sorted(zip(chosen, tails, strict=True)):
        for line in lines or ():
            tracker.log_line(pod, line, live=False)  # a tail: no clock
    started = sum(1 for r in tracker.state.ranks.values()
                  if r.pod and tracker.pod_started(r.pod))
    if started > len(chosen):
        unit = tracker.state.unit
        tracker.state.notes.append(
            f"step and loss read from {len(chosen)} of {started} {unit}s' logs (the failed "
            f"ones first, then the lowest); `kdist logs --node N` reads any other")
