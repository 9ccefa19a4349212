"""A 1,000-pod gang that fails together is not 1,000 warning lines (issue 53).

Every pod of a restarting gang exits at once; the watch said each one. Per-pod warnings
of one kind are now said for MAX_PER_KIND pods, then once that the rest are held back;
the state keeps every rank's failure.
"""

from __future__ import annotations

from kdist.kube.watch.podwarnings import MAX_PER_KIND
from kdist.kube.watch.tracker import Tracker
from tests.api import objects

NODES = 200


def _job() -> dict:
    job = objects.job("big", nodes=NODES)
    job["metadata"]["uid"] = "job-uid"
    return job


def _failed_pod(job: dict, rank: int) -> dict:
    pod = objects.pod(job, rank, exit_code=1)
    pod["metadata"]["uid"] = f"uid-{rank}"
    return pod


def test_a_gang_failing_together_is_a_bounded_number_of_lines():
    job = _job()
    tracker = Tracker("big", "default")
    tracker.job_event("ADDED", job)
    warnings = [w for rank in range(NODES)
                for w in tracker.pod_event("MODIFIED", _failed_pod(job, rank))]
    exits = [w for w in warnings if "exited with code 1" in w]
    assert len(exits) == MAX_PER_KIND, warnings
    held = [w for w in warnings if w.startswith("more pods than")]
    assert len(held) == 1 and "kdist status" in held[0], warnings
    assert len(warnings) <= MAX_PER_KIND + 1, warnings
    # The state still holds every rank's failure.
    assert {f.rank for f in tracker.state.failures} == set(range(NODES))


def test_a_few_failing_pods_are_each_said():
    job = _job()
    tracker = Tracker("big", "default")
    tracker.job_event("ADDED", job)
    warnings = [w for rank in range(3)
                for w in tracker.pod_event("MODIFIED", _failed_pod(job, rank))]
    exits = [w for w in warnings if "exited with code 1" in w]
    assert [w.split(":")[0] for w in exits] == [f"rank {r} (pod big-{r}-abcde)"
                                                 for r in range(3)], warnings
    assert not any(w.startswith("more pods than") for w in warnings), warnings
