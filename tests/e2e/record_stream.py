"""Record what `kdist.kube.watch.reflector` sees of one job into a tests/unit/test_watch.py fixture.

    python tests/e2e/record_stream.py -n NAMESPACE JOB OUT.jsonl

Run it on a job just submitted (`kdist submit --no-wait`); it follows the job
to its end exactly as `kdist submit` does and writes every item the tracker
is fed, in order, in the format of tests/unit/fixtures/handmade.py
(managedFields dropped, nothing else changed).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kdist.kube.client import Cluster
from kdist.kube.connect.config import ClusterOptions
from kdist.kube.watch.reflector import Session
from kdist.kube.watch.sources import job_sources
from kdist.kube.watch.tracker import Tracker


class RecordingTracker(Tracker):
    def __init__(self, name: str, namespace: str) -> None:
        super().__init__(name, namespace)
        self.items: list[dict[str, Any]] = []

    def feed(self, source: str, kind: str, payload: Any) -> list[str]:
        self.items.append(_item(source, kind, payload))
        return super().feed(source, kind, payload)


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    obj = json.loads(json.dumps(obj))
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


def _item(source: str, kind: str, payload: Any) -> dict[str, Any]:
    if source == "logs":
        return {"source": source, "type": kind, "pod": payload[0], "line": payload[1]}
    if kind == "relist":
        return {"source": source, "type": kind, "items": [_strip(o) for o in payload]}
    return {"source": source, "type": kind, "object": _strip(payload)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", "--namespace", required=True)
    parser.add_argument("job")
    parser.add_argument("out")
    args = parser.parse_args()
    cluster = Cluster.connect(ClusterOptions(namespace=args.namespace))
    job = cluster.get_job(args.job, args.namespace)
    tracker = RecordingTracker(args.job, args.namespace)
    session = Session(tracker, job_sources(cluster, job))
    session.start()
    for kind, payload in session.events():
        if kind == "warning":
            print("warning:", payload)
    session.close()
    with open(args.out, "w") as f:
        for item in tracker.items:
            f.write(json.dumps(item, sort_keys=True) + "\n")
    print(f"{len(tracker.items)} items, outcome {tracker.state.outcome}: "
          f"{tracker.state.failure_line() if tracker.state.outcome != 'Succeeded' else ''}")


if __name__ == "__main__":
    main()
