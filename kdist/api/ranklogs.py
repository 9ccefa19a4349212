"""Every rank's log as it is now (`kdist logs NAME`, `Client.rank_logs`), each rank's
read on its own.

At 1,000 nodes some pod's log is nearly always unreadable: kwok's pods have no node
to read it from (500), a real pod's node may be gone (404, 502) or its container not
started (400). Such a rank no longer ends the read: its `LogLines.note` says why, and
the other ranks' logs follow (`rank_own` says which failures are a rank's own). A
server that lets several reads in a row time out ends them all (`Stalls`): it would
cost a request timeout per rank.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from functools import partial

from kdist.api.jobs import _check_rank, no_log_note, tracked
from kdist.api.types import Connection, RankLog
from kdist.kube.errors import ErrorStatus, Unreachable
from kdist.shared.errors import ClusterError, JobNotFound, KdistError

#: Reads of this many ranks' logs in a row that the API server let time out: it answers
#: none, so the other ranks' reads would each wait the request timeout too (1,000 of them).
STALLED_READS = 3


def rank_own(e: BaseException) -> bool:
    """Whether `e`, met reading one pod's log, is that rank's alone, so that the other
    ranks' logs are still worth reading: an error status the API server answered for
    it (`ErrorStatus`: a 5xx after its retries, a 400), a 404 (its pod or node gone),
    or no whole answer (a deadline, an answer broken off).

    Not a rank's own, so still fatal at once: a 401 or 403 (every rank's log would be
    refused alike), a server not reached at all (refused, no such host, TLS, a proxy),
    and kdist's own limits on an answer (a line or a list too long). A job that is not
    there fails before any log is read.
    """
    if isinstance(e, Unreachable):
        return e.why in ("timeout", "other")
    return isinstance(e, (ErrorStatus, JobNotFound))


class Stalls:
    """Log reads timed out in a row, over the ranks of one call: past `STALLED_READS`
    the server is taken as answering nothing, and the read of every rank ends."""

    def __init__(self) -> None:
        self.in_a_row = 0

    def answered(self) -> None:
        self.in_a_row = 0

    def timed_out(self, e: Unreachable) -> None:
        self.in_a_row += 1
        if self.in_a_row >= STALLED_READS:
            raise ClusterError(f"the API server answered none of the last {self.in_a_row} "
                               f"ranks' log reads ({e}); the other ranks' logs were not read")


class LogLines(Iterator[str]):
    """One rank's lines as they are read. A failure of the rank's own (`rank_own`) ends
    them early instead of raising: `note` then says so, with the API's answer; the
    lines before it were real and stay. `stalls`, shared by the ranks of one call,
    ends them all once the server has let several reads in a row time out."""

    def __init__(self, pod: str, read: Callable[[], Iterable[str]],
                 stalls: Stalls | None = None) -> None:
        self.pod, self.count, self.failed = pod, 0, ""
        self._lines: Iterator[str] | None = None
        self._read = read  # called at the first line: each log read only when wanted
        self._stalls = stalls or Stalls()

    def __next__(self) -> str:
        try:
            if self._lines is None:
                self._lines = iter(self._read())
            line = next(self._lines)
        except StopIteration:
            self._stalls.answered()
            raise
        except KdistError as e:
            if not rank_own(e):
                raise
            if isinstance(e, Unreachable) and e.why == "timeout":
                self._stalls.timed_out(e)
            else:
                self._stalls.answered()  # an answer, if a refusal: the server is there
            self.failed, self._lines = str(e), iter(())
            raise StopIteration from None
        if not self.count:
            self._stalls.answered()
        self.count += 1
        return line

    @property
    def note(self) -> str:
        """Why the lines ended early ("" when they did not)."""
        if not self.failed:
            return ""
        what = f"log cut off after {self.count} line{'s' * (self.count != 1)}" \
            if self.count else "log not readable"
        return f"{what}: pod {self.pod}: {self.failed}"


def rank_logs(conn: Connection, name: str, *, rank: int | None = None,
              tail: int | None = None) -> list[RankLog]:
    """Every rank's log (or one rank's) as it is now, in rank order (each a list: a log
    past the answer cap is refused; `rank_log_streams` reads any size). A rank whose log
    the API refused or did not answer (`rank_own`) has no lines and a `note` saying why;
    anything else raises, as a missing job does."""
    out = []
    for entry, lines in rank_log_streams(conn, name, rank=rank, tail=tail, whole=True):
        got = list(lines)
        out.append(replace(entry, lines=got, note=entry.note or lines.note))
    return out


def rank_log_streams(conn: Connection, name: str, *, rank: int | None = None,
                     tail: int | None = None,
                     whole: bool = False) -> list[tuple[RankLog, LogLines]]:
    """As `rank_logs`, each rank's lines a `LogLines` that reads them only when they are
    iterated, as the API server sends them (`Cluster.log_lines`: a log of any size, never
    held whole; `whole`: `Cluster.read_log`'s capped list, for `rank_logs`). The job and
    its pods are read here. A rank whose read fails on its own ends early,
    `LogLines.note` saying why; any other failure raises from the lines."""
    cluster, ns = conn.cluster(), conn.namespace()
    job = cluster.get_job(name, ns)
    _check_rank(job, rank)
    tracker = tracked(cluster, job)
    state = tracker.state

    def read(pod: str) -> Iterable[str]:
        return (cluster.read_log if whole else cluster.log_lines)(
            pod, ns, tail=tail, container=tracker.container)

    out: list[tuple[RankLog, LogLines]] = []
    stalls = Stalls()
    for r in sorted(state.ranks.values(), key=lambda r: r.rank):
        if rank is not None and r.rank != rank:
            continue
        if not r.pod or not tracker.pod_started(r.pod):
            out.append((RankLog(r.rank, r.pod, [], no_log_note(state, r),
                                state.procs_per_node), LogLines(r.pod, tuple)))
            continue
        out.append((RankLog(r.rank, r.pod, [], procs_per_node=state.procs_per_node),
                    LogLines(r.pod, partial(read, r.pod), stalls)))
    return out
