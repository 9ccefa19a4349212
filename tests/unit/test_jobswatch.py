"""One watcher for many jobs: events of two recorded jobs, interleaved, land in the
right trackers with the same outcome as each job's own tracker (no cluster)."""

from __future__ import annotations

import itertools
from typing import Any

from kdist.kube import kinds
from kdist.kube.watch.jobswatch import JobsWatch
from tests.unit.test_watch import load, payload, replay


class _Cluster:
    """The one thing JobsWatch asks a cluster before watching: which training kinds exist."""

    server = "http://127.0.0.1:1"

    def training_kinds(self) -> list[kinds.Kind]:
        return list(kinds.TRAINING)


def _stream(name: str, namespace: str) -> list[tuple[str, str, Any]]:
    out = []
    for item in load(name):
        if item["source"] == "logs":
            continue
        value = payload(item)
        objs = value if isinstance(value, list) else [value]
        for obj in objs:
            if isinstance(obj, dict) and obj.get("metadata"):
                obj["metadata"]["namespace"] = namespace
        out.append((item["source"], item["type"], value))
    return out


def test_interleaved_jobs_are_demultiplexed():
    watch = JobsWatch(_Cluster(), None)  # type: ignore[arg-type]
    a = _stream("recorded_indexed_success", "ns-a")
    b = _stream("recorded_pytorchjob_failure", "ns-b")
    for item in itertools.chain.from_iterable(itertools.zip_longest(a, b)):
        if item is None:
            continue
        source, kind, value = item
        if source == "job":
            index = 1 if (value[0] if isinstance(value, list) and value else value or {}).get(
                "kind") == "PyTorchJob" else 0
            if kind == "relist":
                # A relist of one kind carries every job of that kind (here: one).
                index = 1 if any(o.get("kind") == "PyTorchJob" for o in value) else 0
            watch._apply(index, "job", kind, value)
        else:
            # Pod relists from the two recordings are partial views; feed them as events.
            for pod in value if kind == "relist" else [value]:
                watch._apply(2, "pods", "MODIFIED" if kind == "relist" else kind, pod)
    states = {s.namespace: s for s in watch.states()}
    alone_a = replay("recorded_indexed_success")[0].state
    alone_b = replay("recorded_pytorchjob_failure")[0].state
    assert set(states) == {"ns-a", "ns-b"}
    for mine, alone in ((states["ns-a"], alone_a), (states["ns-b"], alone_b)):
        assert (mine.outcome, mine.reason, mine.nodes) == (alone.outcome, alone.reason,
                                                           alone.nodes)
        assert {r.rank: (r.phase, r.exit_code) for r in mine.ranks.values()} == \
            {r.rank: (r.phase, r.exit_code) for r in alone.ranks.values()}


def test_unwanted_jobs_get_no_tracker():
    watch = JobsWatch(_Cluster(), "ns", wanted=lambda key: key[1] == "keep")  # type: ignore
    for name in ("keep", "drop"):
        watch._apply(0, "job", "ADDED", {"kind": "Job", "metadata": {
            "name": name, "namespace": "ns", "uid": name}, "spec": {"completions": 1}})
    assert [s.name for s in watch.states()] == ["keep"]
