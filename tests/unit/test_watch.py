"""The watch state machine fed with event streams (tests/unit/fixtures/*.jsonl).

Hand-made streams are written by fixtures/handmade.py; `recorded_*.jsonl`
were recorded from a real cluster. No mocks of kdist code: the fakes below
stand in for the API server only (a list/watch source and a log source).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from kdist.cli.progress import sparkline
from kdist.kube.errors import Action, Gone, HttpError, Transient, api_error
from kdist.kube.watch.logfollow import follow_log
from kdist.kube.watch.objects import job_phase, parse_record, pod_rank
from kdist.kube.watch.reflector import Backoff, Reflector, Session, Sources, wait_empty
from kdist.kube.watch.tracker import Tracker
from kdist.shared.errors import ClusterError, JobNotFound
from kdist.shared.facts import max_steps_from_args

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines()]


def payload(item: dict[str, Any]) -> Any:
    if item["type"] == "relist":
        return item["items"]
    if item["source"] == "logs":
        return item["pod"], item["line"]
    return item["object"]


def replay(name: str, tracker: Tracker | None = None) -> tuple[Tracker, list[str]]:
    """Feed a stream to a tracker; return it and every warning, in order."""
    items = load(name)
    first_job = next(i for i in items if i["source"] == "job")
    job = payload(first_job)
    tracker = tracker or Tracker((job[0] if isinstance(job, list) else job)["metadata"]["name"])
    warnings: list[str] = []
    for item in items:
        warnings += tracker.feed(item["source"], item["type"], payload(item))
    return tracker, warnings


# ---- whole streams --------------------------------------------------------------------------


def test_indexed_job_success():
    t, warnings = replay("indexed_success")
    s = t.state
    assert (s.outcome, s.kind, s.backend, s.nodes, s.max_steps) == (
        "Succeeded", "Job", "indexed-job", 2, 20)
    assert s.reason == "CompletionsReached"  # SuccessCriteriaMet is terminal already
    assert warnings == []
    for r in (0, 1):
        rank = s.ranks[r]
        assert (rank.pod, rank.phase, rank.step, rank.done, rank.exit_code) == (
            f"mnist-{r}-{'ab'[r] * 5}", "Succeeded", 20, True, 0)
    assert s.ranks[0].losses == [1.25, 0.75]
    assert s.ranks[1].losses == [1.31, 0.79]  # a launcher prefix before the JSON is fine
    assert s.to_dict()["ranks"][1]["loss"] == 0.79


def test_indexed_job_failure_names_rank_and_exit_code():
    t, warnings = replay("indexed_failure")
    s = t.state
    assert s.outcome == "Failed" and s.reason == "PodFailurePolicy"
    assert s.first_failure().rank == 1
    assert [(f.rank, f.exit_code) for f in s.failures] == [(1, 3), (0, 143)]
    line = s.failure_line()
    assert "rank 1 (pod mnist-1-bbbbb) exited with code 3" in line
    assert "\n" not in line
    assert any("rank 1" in w and "exited with code 3" in w for w in warnings)


def test_json_names_the_code_error_even_when_a_lost_peer_came_first():
    from kdist.kube.watch.state import Failure, JobState
    s = JobState("j", outcome="Failed")
    s.failures += [Failure(0, "j-0-a", 203, "Error", "2026-12-02T00:00:01Z"),
                   Failure(1, "j-1-b", 3, "Error", "2026-12-02T00:00:01Z", said="boom")]
    d = s.to_dict()
    assert [f["exit_code"] for f in d["failures"]] == [203, 3]  # by time, as they came
    assert (d["firstFailure"]["rank"], d["firstFailure"]["exit_code"]) == (1, 3)
    assert "rank 1 (pod j-1-b) exited with code 3: boom" in s.failure_line()
    assert JobState("ok").to_dict()["firstFailure"] is None


def test_failure_target_is_terminal_before_failed():
    items = load("indexed_failure")
    t = Tracker("mnist")
    for item in items:
        t.feed(item["source"], item["type"], payload(item))
        if item["source"] == "job" and "FailureTarget" in json.dumps(item):
            break
    assert t.state.outcome == "Failed"


def test_pytorchjob_success_ranks_from_replica_labels():
    t, warnings = replay("pytorchjob_success")
    s = t.state
    assert (s.outcome, s.kind, s.backend, s.nodes) == ("Succeeded", "PyTorchJob", "pytorchjob", 2)
    assert s.ranks[0].pod == "pt-master-0" and s.ranks[1].pod == "pt-worker-0"
    assert (s.ranks[0].step, s.ranks[1].step) == (20, 20)
    assert warnings == []


def test_pytorchjob_failure_survives_the_failed_pod_being_replaced():
    t, _ = replay("pytorchjob_failure")
    s = t.state
    assert s.outcome == "Failed" and s.reason == "PyTorchJobFailed"
    assert "rank 1 (pod pt-worker-0) exited with code 1" in s.failure_line()
    assert (s.ranks[1].phase, s.ranks[1].restarts) == ("Pending", 1)  # the new pod


def test_pytorchjob_running_false_is_not_terminal():
    t = Tracker("pt")
    items = [i for i in load("pytorchjob_success") if i["source"] == "job"]
    for item in items[:-1]:
        t.feed(item["source"], item["type"], payload(item))
    assert t.state.outcome is None and t.state.phase in ("Pending", "Running")


def test_unschedulable_warned_once():
    t, warnings = replay("unschedulable")
    assert len(warnings) == 1
    assert warnings[0].startswith("FailedScheduling: rank 0")
    assert "Insufficient nvidia.com/gpu" in warnings[0]
    assert t.state.outcome is None
    assert {r.reason for r in t.state.ranks.values()} == {"Unschedulable"}


def test_each_trouble_warned_once():
    t, warnings = replay("trouble")
    kinds = [
        ("cannot pull image 'kdist-train:dev-cpu'", "rank 0"),
        ("OOMKilled (exit code 137)", "rank 1"),
        ("restarted (1x), last exit code 137", "rank 1"),
        ("CrashLoopBackOff (last exit code 137)", "rank 1"),
        ("restarted (2x)", "rank 1"),
        ("was evicted: The node was low on resource: memory.", "rank 2"),
    ]
    for text, who in kinds:
        hits = [w for w in warnings if text in w]
        assert len(hits) == 1, (text, warnings)
        assert who in hits[0]
    assert len(warnings) == len(kinds), warnings
    # an evicted pod's 137 is the eviction, not reported again as an exit code
    assert not any("exited with code" in w for w in warnings)
    # rank 2 was replaced: the new pod is shown, the replacement counted as a restart
    assert (t.state.ranks[2].pod, t.state.ranks[2].restarts) == ("mnist-2-ddddd", 1)
    assert t.state.ranks[1].restarts == 2


def test_replaying_a_stream_twice_warns_nothing_new():
    t, first = replay("trouble")
    _, again = replay("trouble", t)
    assert first and again == []


def test_job_deleted_while_watching():
    t, _ = replay("unschedulable")
    t.feed("job", "relist", [])
    assert t.state.outcome == "Deleted"
    assert "deleted before it finished" in t.state.failure_line()


# ---- the reflector: resume, relist on 410, bounded reconnect ---------------------------------


class ScriptedSource:
    """A fake API server for one list/watch pair, following a recorded script."""

    what = "pods of mnist"

    def __init__(self, script: list[dict[str, Any]], stop: threading.Event) -> None:
        self.script, self.stop = list(script), stop
        self.calls: list[tuple[str, str | None]] = []

    def _next(self, op: str) -> dict[str, Any]:
        if not self.script:
            self.stop.set()
            return {"op": op, "rv": "0", "items": [], "events": [], "then": "end"}
        step = self.script.pop(0)
        assert step["op"] == op, (step["op"], op)
        return step

    def list(self) -> tuple[list[dict[str, Any]], str]:
        step = self._next("list")
        self.calls.append(("list", None))
        return step["items"], step["rv"]

    def watch(self, resource_version: str):
        self.calls.append(("watch", resource_version))
        step = self._next("watch")
        yield from step["events"]
        if step["then"] == "gone":
            raise Gone()
        if step["then"] == "transient":
            raise Transient("connection reset by peer")


def test_reflector_resumes_relists_on_410_and_bookmarks_advance():
    stop = threading.Event()
    source = ScriptedSource(load("relist_410"), stop)
    t = Tracker("mnist")
    warnings: list[str] = []
    reflector = Reflector(source, lambda k, o: warnings.extend(t.feed("pods", k, o)), stop,
                          Backoff(attempts=3, first=0))
    reflector.run()
    assert source.calls == [
        ("list", None), ("watch", "100"),  # the ERROR 410 event after a BOOKMARK at 150
        ("list", None), ("watch", "200"),  # relisted; then the connection drops...
        ("watch", "210"),  # ...and the watch resumes from the last event, no relist
        ("list", None), ("watch", "230"),  # a 410 answering the request relists too
    ]
    assert reflector.relists == 3
    assert [w for w in warnings if "restarted" in w] == [
        "rank 1 (pod mnist-1-bbbbb): container pytorch exited with code 1 (Error): a code error "
        "(not retried); restarted (1x)"]
    r1 = t.state.ranks[1]
    assert (r1.pod, r1.phase, r1.restarts) == ("mnist-1-zzzzz", "Succeeded", 1)
    assert t.state.ranks[0].phase == "Succeeded"


def test_reflector_gives_up_after_bounded_reconnects():
    stop = threading.Event()

    class Down:
        what = "job mnist"
        attempts = 0

        def list(self):
            return [], "1"

        def watch(self, rv):
            Down.attempts += 1
            raise Transient("connection refused")
            yield  # a generator, like the real one

    with pytest.raises(ClusterError, match="lost the watch on job mnist after 4 attempts"):
        Reflector(Down(), lambda k, o: None, stop, Backoff(attempts=4, first=0)).run()
    assert Down.attempts == 4


def test_reflector_backs_off_when_watches_keep_ending_at_once():
    class Closing:
        what = "pods of mnist"
        watches = 0

        def list(self):
            return [], "1"

        def watch(self, rv):
            Closing.watches += 1
            return iter(())

    with pytest.raises(ClusterError, match="ended at once"):
        Reflector(Closing(), lambda k, o: None, threading.Event(),
                  Backoff(attempts=3, first=0)).run()
    assert Closing.watches == 3


def test_reflector_raises_watch_errors_that_are_not_410():
    stop = threading.Event()
    script = [{"op": "list", "rv": "1", "items": []},
              {"op": "watch", "events": [{"type": "ERROR", "object": {
                  "code": 403, "message": "pods is forbidden"}}], "then": "end"}]
    with pytest.raises(ClusterError, match="forbidden"):
        Reflector(ScriptedSource(script, stop), lambda k, o: None, stop).run()


def test_reflector_counts_failures_of_every_shape_together():
    """A 410, an ERROR event, a lone BOOKMARK and an empty end are none of them news: mixed,
    they still add up to the bound (an ERROR event used to reset the count, a BOOKMARK to
    count as progress, a 410 not to count at all). A successful list is not news either."""
    stop = threading.Event()
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}}
    error = {"type": "ERROR", "object": {"code": 500, "message": "etcd leader changed"}}
    gone = {"type": "ERROR", "object": {"code": 410, "message": "too old"}}
    listed = {"op": "list", "rv": "1", "items": []}
    script = [listed, {"op": "watch", "events": [bookmark], "then": "end"},
              {"op": "watch", "events": [error], "then": "end"},
              {"op": "watch", "events": [], "then": "gone"}, listed,
              {"op": "watch", "events": [bookmark, gone], "then": "end"}, listed,
              {"op": "watch", "events": [], "then": "transient"}]
    source = ScriptedSource(script, stop)
    with pytest.raises(ClusterError, match="after 5 attempts in a row: connection reset"):
        Reflector(source, lambda k, o: None, stop, Backoff(attempts=5, first=0)).run()
    assert not source.script, "gave up early"


def test_reflector_news_resets_the_count():
    stop = threading.Event()
    error = {"type": "ERROR", "object": {"code": 500, "message": "etcd leader changed"}}
    pod = {"kind": "Pod", "metadata": {"name": "p", "resourceVersion": "9"}}
    failing = [{"op": "watch", "events": [error], "then": "end"}] * 2
    script = [{"op": "list", "rv": "1", "items": []}, *failing,
              {"op": "watch", "events": [{"type": "ADDED", "object": pod}, error],
               "then": "end"}, *failing]
    seen: list[str] = []
    Reflector(ScriptedSource(script, stop), lambda k, o: seen.append(k), stop,
              Backoff(attempts=4, first=0)).run()  # never 4 in a row: ends with the script
    assert seen == ["relist", "ADDED"]


def test_wait_empty_returns_once_everything_is_deleted():
    stop = threading.Event()
    pods = load("relist_410")[0]["items"]
    script = [{"op": "list", "rv": "5", "items": pods},
              {"op": "watch", "events": [{"type": "DELETED", "object": p} for p in pods],
               "then": "end"}]
    wait_empty(ScriptedSource(script, stop), timeout=10)


def test_wait_empty_times_out_naming_what_is_left():
    class Stuck:
        what = "pods of mnist"

        def __init__(self):
            self.stop = threading.Event()

        def list(self):
            return [{"kind": "Pod", "metadata": {"name": "mnist-0-aaaaa", "uid": "u"}}], "5"

        def watch(self, rv):
            self.stop.wait(5)
            return iter(())

    with pytest.raises(ClusterError, match="still there: Pod/mnist-0-aaaaa"):
        wait_empty(Stuck(), timeout=0.2)


# ---- log following ------------------------------------------------------------------------------


class FakeLogs:
    """Serves a pod's log in pieces: each `stream_log` call returns the next piece."""

    def __init__(self, pieces: list[list[str] | Exception], instances: list[Any]) -> None:
        self.pieces, self.instances = pieces, instances
        self.calls: list[dict[str, Any]] = []

    def stream_log(self, pod, *, follow, tail, since_seconds):
        self.calls.append({"tail": tail, "since": since_seconds})
        piece = self.pieces.pop(0)
        if isinstance(piece, Exception):
            raise piece
        yield from piece

    def container_instance(self, pod):
        return self.instances.pop(0)


def test_follow_log_reconnects_without_duplicates_and_stops_with_the_container():
    a = "2025-11-30T10:00:01.5Z first"
    b = "2025-11-30T10:00:01.75Z second"
    b2 = "2025-11-30T10:00:01.75Z second, same instant"
    c = "2025-11-30T10:00:02Z third"  # RFC3339Nano trims zeros: compared as numbers
    logs = FakeLogs([[a, b], Transient("reset"), [a, b, b2, c]], [(True, 0), (False, 0)])
    got: list[Any] = []
    follow_log(logs, "mnist-0-aaaaa", lambda k, p: got.append(p), threading.Event(), tail=5,
               backoff=Backoff(first=0))
    assert [line for _, line in got] == ["first", "second", "second, same instant", "third"]
    assert logs.calls[0]["tail"] == 5 and logs.calls[2]["tail"] is None
    assert logs.calls[2]["since"] >= 1


def test_follow_log_hands_a_restarted_container_to_a_new_follower():
    logs = FakeLogs([["2025-11-30T10:00:01Z one"]], [(True, 1)])
    got: list[Any] = []
    follow_log(logs, "p", lambda k, p: got.append(p), threading.Event(), instance=0)
    assert got == [("p", "one")] and len(logs.calls) == 1


# ---- a whole session over fake sources ----------------------------------------------------------


class ReplaySource:
    """Lists what a recorded stream ends with, then blocks like a quiet watch."""

    def __init__(self, what: str, items: list[dict[str, Any]], stop: threading.Event) -> None:
        self.what, self.items, self.stop = what, items, stop

    def list(self):
        return self.items, "1"

    def watch(self, rv):
        self.stop.wait(2)
        return iter(())


def test_session_follows_to_the_end_and_drains_logs():
    items = load("indexed_success")
    job = [payload(i) for i in items if i["source"] == "job"][-1]
    pods: dict[str, Any] = {}
    lines: dict[str, list[str]] = {}
    for i in items:
        if i["source"] == "pods" and i["type"] != "relist":
            pods[i["object"]["metadata"]["name"]] = i["object"]
        if i["source"] == "logs":
            lines.setdefault(i["pod"], []).append(f"2025-11-30T10:00:05Z {i['line']}")

    class Logs:
        def stream_log(self, pod, *, follow, tail, since_seconds):
            return iter(lines[pod])

        def container_instance(self, pod):
            return False, 0

    stop = threading.Event()
    tracker = Tracker("mnist")
    session = Session(tracker, Sources(ReplaySource("job", [job], stop),
                                       ReplaySource("pods", list(pods.values()), stop), Logs()))
    session.start()
    seen = list(session.events(tick=0.1, drain=5))
    session.close()
    stop.set()
    assert ("terminal", None) in seen
    logged = [p for k, p in seen if k == "log"]
    assert (0, json.dumps({"event": "done", "step": 20, "rank": 0, "world_size": 2})) in logged
    assert len(logged) == sum(len(v) for v in lines.values())
    assert tracker.state.ranks[1].losses == [1.31, 0.79]


# ---- small pure pieces ---------------------------------------------------------------------------


@pytest.mark.parametrize("labels,annotations,rank", [
    ({"batch.kubernetes.io/job-completion-index": "3"}, {}, 3),
    ({}, {"batch.kubernetes.io/job-completion-index": "2"}, 2),
    ({"training.kubeflow.org/replica-type": "master",
      "training.kubeflow.org/replica-index": "0"}, {}, 0),
    ({"training.kubeflow.org/replica-type": "worker",
      "training.kubeflow.org/replica-index": "0"}, {}, 1),
    ({"training.kubeflow.org/replica-type": "Worker",
      "training.kubeflow.org/replica-index": "4"}, {}, 5),
    ({"app": "x"}, {}, None),
])
def test_pod_rank(labels, annotations, rank):
    assert pod_rank({"metadata": {"labels": labels, "annotations": annotations}}) == rank


@pytest.mark.parametrize("args,steps", [
    (["--module", "m", "--", "--max-steps", "40"], 40),
    (["--max-steps=7", "--lr", "0.1"], 7),
    (["--max-steps"], None),
    (["--max-steps", "lots"], None),
    ([], None),
])
def test_max_steps_from_args(args, steps):
    assert max_steps_from_args(args) == steps


def test_parse_record():
    assert parse_record('{"event": "step", "step": 1, "loss": 0.5}')["step"] == 1
    assert parse_record('[default0]:{"event": "done"}') == {"event": "done"}
    assert parse_record("loss is 0.5") is None
    assert parse_record('{"event": "step", "loss": ') is None
    assert parse_record('{"step": 1}') is None


def test_job_phase_from_object_alone():
    items = load("pytorchjob_success")
    objs = [payload(i) for i in items if i["source"] == "job"]
    assert job_phase(objs[0][0]) == "Pending"
    assert job_phase(objs[1]) == "Running"
    assert job_phase(objs[-1]) == "Succeeded"


def test_sparkline():
    assert sparkline([3.0, 2.0, 1.0, 1.0]) == "█▄▁▁"
    assert sparkline([]) == "" and sparkline([5.0, 5.0]) == "▁▁"


# ---- API errors become one clear line ------------------------------------------------------------


def _api_exc(status: int, body: dict[str, Any] | str) -> HttpError:
    return HttpError(status, "x", (body if isinstance(body, str) else json.dumps(body)).encode())


def test_api_error_messages():
    server = "https://10.244.0.1:6443"
    create = Action("create", "jobs", "team-a", "mnist")
    msg = str(api_error(_api_exc(409, {"kind": "Status", "reason": "AlreadyExists"}), create,
                        server))
    assert msg == ("job mnist already exists in namespace team-a: use --replace or "
                   "`kdist delete mnist`")
    forbidden = api_error(_api_exc(403, {"kind": "Status", "message": "nope"}),
                          Action("create", "pytorchjobs", "team-a", "pt"), server)
    assert str(forbidden).startswith("forbidden: create pytorchjobs in namespace team-a")
    missing = api_error(_api_exc(404, "404 page not found"),
                        Action("create", "pytorchjobs", "team-a", "pt"), server)
    assert "the Kubeflow training operator is not installed" in str(missing)
    invalid = api_error(_api_exc(422, {"kind": "Status", "details": {"causes": [
        {"field": "spec.completions", "message": "must be >= 0"}]}}), create, server)
    assert "spec.completions: must be >= 0" in str(invalid) and invalid.exit_code == 3
    gone = api_error(_api_exc(404, {"kind": "Status", "reason": "NotFound",
                                    "details": {"name": "mnist", "kind": "jobs"}}),
                     Action("get", "jobs", "team-a", "mnist"), server)
    assert isinstance(gone, JobNotFound) and gone.exit_code == 2
    html = api_error(_api_exc(502, "<html><body>Bad gateway</body></html>"), create, server)
    assert "502" in str(html) and "Bad gateway" in str(html) and html.exit_code == 3


# ---- streams recorded on the real cluster (tests/e2e/record_stream.py) ---------------------------


def test_recorded_indexed_success_ends_at_success_criteria_met():
    t, warnings = replay("recorded_indexed_success")
    s = t.state
    assert (s.outcome, s.reason, s.max_steps) == ("Succeeded", "CompletionsReached", 6)
    assert [(r.step, r.done, len(r.losses), r.phase) for r in s.ranks.values()] == [
        (6, True, 3, "Succeeded"),
        (6, True, 3, "Succeeded"),
    ]
    assert warnings == []


@pytest.mark.parametrize("name,reason", [
    ("recorded_indexed_failure", "PodFailurePolicy"),
    ("recorded_pytorchjob_failure", "PyTorchJobFailed"),
])
def test_recorded_failures_name_rank_1_and_exit_code_3(name, reason):
    t, warnings = replay(name)
    s = t.state
    assert (s.outcome, s.reason) == ("Failed", reason)
    assert "rank 1 (pod rec-bad-" in s.failure_line()
    assert "exited with code 3" in s.failure_line()
    assert len([w for w in warnings if "exited with code 3" in w]) == 1


def test_a_gang_restart_is_counted_even_after_the_failed_pods_are_gone():
    """A deleted pod vanishes from the API; the Job controller's per-index count does not."""
    from .fixtures.handmade import idx, pod, running, terminated

    t = Tracker("mnist")
    old = pod("mnist-0-aaaaa", idx(0), 5, "Failed", terminated(203, 20))
    old["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        '{"event": "step", "step": 40}\nkdist: rank 0 lost a peer (RuntimeError: gloo)\n'
        "kdist.launch: worker rank 0 (node 0, local rank 0, pid 9) exited with code 203; "
        "exiting 203: lost a peer (retryable)\n")
    warnings = t.feed("pods", "relist", [old])
    assert any("exited with code 203" in w and "lost a peer" in w for w in warnings), warnings
    new = pod("mnist-1-ccccc", idx(1), 7, "Running", running(30), created=30)
    new["metadata"]["annotations"] = {"batch.kubernetes.io/job-index-failure-count": "1"}
    t.feed("pods", "relist", [old, new])  # rank 1's first pod was deleted: never seen
    t.feed("logs", "log", ("mnist-1-ccccc", '{"event": "resume", "step": 40, "rank": 1}'))
    assert t.state.ranks[0].restarts == 0 and t.state.ranks[1].restarts == 1
    assert t.state.ranks[1].step == 40
    assert t.state.failures[0].said.startswith("kdist.launch: worker rank 0")
