"""Many jobs, one watcher: wait for several jobs, or watch every job, with three watches."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from kdist.api.types import Connection
from kdist.shared.errors import JobFailed, TimedOut
from kdist.shared.terminal import escape

if TYPE_CHECKING:
    from kdist.kube.watch.tracker import JobState


def wait_many(conn: Connection, names: list[str], *, all_jobs: bool = False,
              selector: str = "", timeout: float | None = None, check: bool = True,
              on_update: Callable[[list[JobState]], None] | None = None,
              on_end: Callable[[JobState], None] | None = None) -> list[JobState]:
    """Follow several jobs to their ends with one watcher (three watches, whatever the count).

    The jobs are `names`, or every kdist job in the namespace that the first
    list shows (`all_jobs`), or those matching a label `selector`. `on_end`
    hears of each job as it ends. With
    `check`, JobFailed names the failed jobs once all have ended; TimedOut when
    `timeout` passes first (the jobs keep running).
    """
    from kdist.kube.watch.jobswatch import JobsWatch, job_label_selector
    from kdist.shared.errors import JobNotFound

    cluster, ns = conn.cluster(), conn.namespace()
    wanted = set(names)
    # One list per kind says which kinds hold the jobs: only those are watched
    # (50 Indexed Jobs: one watch on Jobs, one on Pods), and a name that is
    # nowhere fails at once.
    found: dict[str, set[str]] = {}
    for kind in cluster.training_kinds():
        found[kind.kind] = {o["metadata"]["name"] for o in cluster.list_objects(
            kind, ns, label_selector=job_label_selector(selector))}
    missing = wanted - set().union(*found.values())
    if missing:
        raise JobNotFound(f"no kdist job {', '.join(sorted(missing))} in namespace {ns}")
    used = [kind for kind in cluster.training_kinds()
            if found[kind.kind] and (not wanted or found[kind.kind] & wanted)]
    if not used:
        return []
    watch = JobsWatch(cluster, ns, selector=selector, training_kinds=used,
                      wanted=(lambda key: key[1] in wanted) if wanted else None)
    deadline = time.monotonic() + timeout if timeout else None
    ended: set[tuple[str, str]] = set()
    chosen: set[tuple[str, str]] | None = None
    watch.start()
    try:
        for _ in watch.events():
            if chosen is None and watch.ready:
                chosen = set(watch.trackers)
                gone = wanted - {name for _, name in chosen}
                if gone:  # deleted since the first list
                    raise JobNotFound(f"no job {', '.join(sorted(gone))} in namespace {ns}")
            if chosen is None:
                continue
            states = [watch.trackers[k].state for k in sorted(chosen)]
            for key in sorted(chosen - ended):
                state = watch.trackers[key].state
                if state.outcome:
                    ended.add(key)
                    if on_end is not None:
                        on_end(state)
            if on_update is not None:
                on_update(states)
            if ended == chosen:
                break
            if deadline is not None and time.monotonic() > deadline:
                left = sorted(name for _, name in chosen - ended)
                raise TimedOut(escape(f"timed out after {timeout:g}s waiting for "
                                      f"{', '.join(left)} (they keep running)"))
    finally:
        watch.close()
    states = [watch.trackers[k].state for k in sorted(chosen or ())]
    failed = [s.name for s in states if s.outcome != "Succeeded"]
    if check and failed:
        # One line, whatever the names the cluster listed hold (kdist.shared.terminal).
        raise JobFailed(escape(f"{len(failed)} of {len(states)} job(s) did not succeed: "
                               f"{', '.join(failed)}"))
    return states


def watch_jobs(conn: Connection, *, all_namespaces: bool = False, selector: str = "",
               on_update: Callable[[list[JobState]], None], progress_every: float = 10.0,
               stop: Callable[[], bool] = lambda: False) -> None:
    """Report every kdist job's state (and rank 0's last step) until `stop()` says so."""
    from kdist.kube.watch.jobswatch import JobsWatch

    cluster, ns = conn.cluster(), conn.namespace()
    watch = JobsWatch(cluster, None if all_namespaces else ns, selector=selector)
    watch.start()
    try:
        for _ in watch.events():
            if watch.ready:
                watch.refresh_progress(min_interval=progress_every)
                on_update(watch.states())
            if stop():
                return
    finally:
        watch.close()
