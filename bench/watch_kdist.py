"""Watch many jobs to their end from one process, as `kdist submit --wait` watches one.

    python -m bench.watch_kdist --kubeconfig K --namespace NS JOB [JOB ...]

For each job, what `kdist submit --wait` does after creating it (kdist.api.follow's
follow loop, without the display): read the job, feed it to a `Tracker`,
run a `kdist.kube.watch.reflector.Session` (the job watch, the pod watch, and a log follower per
pod) and consume its events until the job is over and its logs are drained.
All jobs share one `Cluster` (one API client, one connection pool). Prints
``{"event": "watched", "jobs": N, "outcomes": {...}, "seconds": S}``, or
``{"event": "unsupported", "why": ...}`` when kdist has no such API (yet).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.watch_kdist")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--drain", type=float, default=30.0, help="as kdist submit --wait (30 s)")
    p.add_argument("jobs", nargs="+")
    args = p.parse_args()
    try:
        from kdist.kube.client import Cluster
        from kdist.kube.connect.config import ClusterOptions
        from kdist.kube.watch.reflector import Session
        from kdist.kube.watch.sources import job_sources
        from kdist.kube.watch.tracker import Tracker
    except ImportError as e:
        print(json.dumps({"event": "unsupported", "why": f"kdist's watch API: {e}"}), flush=True)
        return 0

    cluster = Cluster.connect(ClusterOptions(kubeconfig=args.kubeconfig,
                                             namespace=args.namespace))

    def follow(name: str) -> str:
        job = cluster.get_job(name, args.namespace)
        tracker = Tracker(name, args.namespace)
        tracker.job_event("ADDED", job)
        session = Session(tracker, job_sources(cluster, job), logs=True)
        session.start()
        try:
            for _ in session.events(drain=args.drain):
                pass
        finally:
            session.close()
        return tracker.state.outcome or "unknown"

    started = time.monotonic()
    with ThreadPoolExecutor(len(args.jobs)) as pool:
        outcomes = Counter(pool.map(follow, args.jobs))
    print(json.dumps({"event": "watched", "jobs": len(args.jobs), "outcomes": dict(outcomes),
                      "seconds": round(time.monotonic() - started, 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
