"""The goodput ledger beyond the cluster watch's pod exits: a launcher's restart in process
(each restart counted once, however many nodes say it) and `kdist run --local`'s ledger,
fed by what the local runner sees."""

from __future__ import annotations

import json

import pytest

from kdist.cli.progress import ledger_lines
from kdist.kube.watch.tracker import Tracker
from kdist.local.ledger import LocalLedger
from kdist.shared import exitcodes
from kdist.shared.ledger import InProcess, Ledger, in_process_line, in_process_restart

CAUSE = "worker rank 1 (node 1, local rank 0, pid 4242) was killed by SIGKILL"
SAID_KILLED = f"{CAUSE} (exit 137: killed by SIGKILL (retryable))"  # the ledger's word for it
SAID_HUNG = f"{CAUSE} (exit 204: {exitcodes.describe(204)})"


def said(number: int, of: int = 3, cause: str = CAUSE, code: int = 137) -> str:
    return "kdist.launch: " + in_process_line(number, of, cause, code)


def step(n: int, event: str = "step", rank: int = 0) -> str:
    return json.dumps({"event": event, "step": n, "rank": rank})


class Clock:
    def __init__(self, now: float = 1796439600.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- the launcher's line ------------------------------------------------------------------


def test_the_in_process_line_reads_back_as_written():
    line = ("kdist.launch: restarting this node's workers (restart 2 of 5, in process): "
            "worker rank 3 (node 1, local rank 1, pid 9) exited with code 1; oops (a.py:3); "
            "exit 203")
    assert said(2, 5, "worker rank 3 (node 1, local rank 1, pid 9) exited with code 1; oops "
                "(a.py:3)", 203) == line
    assert in_process_restart(line) == InProcess(
        2, 5, "worker rank 3 (node 1, local rank 1, pid 9) exited with code 1; oops (a.py:3)",
        203)
    # Only the launcher's own line, its words first: with anything before them (a rank's
    # prefix, a logger's, a space) it is a worker's that quotes them.
    for forged in ("[node 1] " + line, "[rank 0] " + line, " " + line, "x" + line,
                   "INFO " + line.replace("restart 2 of 5", "restart 777 of 5")):
        assert in_process_restart(forged) is None, forged
    for other in ("kdist.launch: worker rank 1 (...) was killed; exiting 137: killed",
                  line.replace(", in process", ""), line.rsplit("; exit", 1)[0],
                  "restarting this node's workers (restart 1 of 3, in process): x; exit 1"):
        assert in_process_restart(other) is None, other


def test_each_restart_in_process_counts_once_whichever_node_says_it():
    led = Ledger()
    one = in_process_restart(said(1))
    assert led.restarted_in_process(one, now=100.0, last_step=50)
    assert not led.restarted_in_process(one, now=100.4, last_step=51)  # the other node
    led.stepped(51, now=101.0, resumed=False)  # the old workers' last line
    led.stepped(40, now=104.0, resumed=True)
    assert led.restarted_in_process(in_process_restart(said(2, code=204)), 200.0, 60)
    led.stepped(1, now=203.0, resumed=False)  # no checkpoint: from the start again
    total = led.summary(3, started=0.0, now=400.0)
    assert [(r["cause"], r["exitCode"], r["secondsLost"], r["stepsLost"])
            for r in total["restarts"]] == [(SAID_KILLED, 137, 4.0, 11), (SAID_HUNG, 204, 3.0, 60)]
    assert (total["restartsUsed"], total["restartsAllowed"], total["stepsLost"]) == (2, 3, 71)


# --- the cluster watch -------------------------------------------------------------------


def pod(rank: int) -> dict:
    return {"metadata": {"name": f"unit-job-{rank}-x", "uid": f"u{rank}",
                         "creationTimestamp": "2026-12-05T03:00:00Z",
                         "labels": {"kdist.dev/job-name": "unit-job",
                                    "batch.kubernetes.io/job-completion-index": str(rank)}},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "pytorch", "restartCount": 0, "state": {"running": {}}}]}}


def test_the_watch_counts_a_restart_in_process_from_every_pods_log_once():
    clock = Clock()
    t = Tracker("unit-job", "d", clock=clock)
    t.pod_event("ADDED", pod(0))
    t.pod_event("ADDED", pod(1))
    for n in (10, 20):
        t.log_line("unit-job-0-x", step(n))
    clock.now += 5
    t.log_line("unit-job-1-x", said(1))
    clock.now += 0.5
    t.log_line("unit-job-0-x", said(1, cause="worker rank 0 lost a peer", code=203))
    clock.now += 7
    t.log_line("unit-job-0-x", step(10, "resume"))
    got = t.state.ledger
    assert got["restartsUsed"] == 1, got
    (r,) = got["restarts"]
    assert (r["cause"], r["exitCode"], r["secondsLost"], r["stepsLost"]) == (
        f"rank 1 (pod unit-job-1-x): {SAID_KILLED}", 137, 7.5, 10)
    assert ledger_lines(got)[0].startswith(
        f"restart 1 at 03:00:05: rank 1 (pod unit-job-1-x): {SAID_KILLED}; back 7.5s later")


def ended(rank: int, code: int, deleted: bool = False) -> dict:
    """pod(rank) whose container exited `code` (`deleted`: the pod is being deleted)."""
    p = pod(rank)
    p["status"]["containerStatuses"][0]["state"] = {"terminated": {
        "exitCode": code, "reason": "Error", "finishedAt": "2026-12-05T03:00:05Z"}}
    if deleted:
        p["metadata"]["deletionTimestamp"] = "2026-12-05T03:00:04Z"
    return p


@pytest.mark.parametrize("rank_0_says", ["in-process", "pod-failed"])
def test_a_deleted_pod_is_the_cause_not_the_peer_that_stopped_at_the_preemption_vote(
        rank_0_says):
    """Pod 1 deleted: its workers and rank 0 stop at the same step (the preemption vote),
    both 143. Rank 0's word comes first; the ledger names the pod that went away."""
    clock = Clock()
    t = Tracker("unit-job", "d", clock=clock)
    t.pod_event("ADDED", pod(0))
    t.pod_event("ADDED", pod(1))
    t.log_line("unit-job-0-x", step(10))
    clock.now += 5
    deleting = pod(1)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-05T03:00:04Z"
    t.pod_event("MODIFIED", deleting)
    vote = "worker rank 0 (node 0, local rank 0, pid 7) exited with code 143"
    if rank_0_says == "in-process":
        t.log_line("unit-job-0-x", said(1, cause=vote, code=143))
    else:
        t.pod_event("MODIFIED", ended(0, 143))
    t.pod_event("MODIFIED", ended(1, 143, deleted=True))
    (r,) = t.state.ledger["restarts"]
    assert r["cause"].startswith("rank 1 (pod unit-job-1-x) exited with code 143"), r
    t.log_line("unit-job-0-x", said(1, cause=vote, code=143))  # a word after: no change
    (r,) = t.state.ledger["restarts"]
    assert r["cause"].startswith("rank 1 (pod unit-job-1-x) exited with code 143"), r


def test_a_log_read_back_later_or_a_finished_job_adds_no_restart():
    t = Tracker("unit-job", "d", clock=Clock())
    t.pod_event("ADDED", pod(0))
    t.log_line("unit-job-0-x", said(1), live=False)  # `kdist status` reading a tail
    t.log_line("unit-job-9-x", said(1))  # no such pod
    assert t.ledger.restarts == [] and t.state.ledger is None
    t.state.outcome = "Failed"
    t.log_line("unit-job-0-x", said(1))
    assert t.ledger.restarts == []


# --- kdist run --local -------------------------------------------------------------------


KILLED = f"kdist.launch: {CAUSE}; exiting 137: killed by SIGKILL (retryable)"
LOST = "kdist.launch: worker rank 0 (node 0, local rank 0, pid 4241) exited with code 1; " \
       "exiting 203: lost a peer (retryable)"


def test_a_local_run_counts_its_restart_from_the_first_failure_to_the_resume():
    clock = Clock()
    led = LocalLedger(max_restarts=2, clock=clock)
    start = clock.now
    for n in range(1, 13):
        led.line(0, f"[rank 0] {step(n)}")
    clock.now += 10
    led.line(1, KILLED)  # its launcher says it first...
    clock.now += 0.2
    led.exited(1, 137)  # ...then exits
    clock.now += 0.5
    led.line(0, LOST)
    led.exited(0, 203)
    led.line(0, f"[rank 0] {step(13)}")  # a last line of the old attempt, still arriving
    led.restarting(1, 137)  # the runner: node 1's exit told most
    assert led.summary(succeeded=False)["restarts"][0]["resumedAt"] is None
    clock.now += 6
    led.line(1, "[rank 1] hello")
    led.line(0, f"[rank 0] {step(8, 'resume')}")
    led.line(1, f"[rank 1] {step(8, 'resume', rank=1)}")
    clock.now += 20
    got = led.summary(succeeded=True)
    (r,) = got["restarts"]
    assert r["cause"] == f"node 1 exited with code 137: killed by SIGKILL (retryable); {CAUSE}"
    assert r["faultAt"].startswith("2026-12-05T03:00:10.000")  # the launcher's line
    assert (r["lastStep"], r["resumedStep"], r["stepsLost"]) == (13, 8, 5)
    assert r["secondsLost"] == pytest.approx(6.7)
    assert (got["restartsUsed"], got["restartsAllowed"], got["succeeded"]) == (1, 2, True)
    assert got["goodput"] == pytest.approx(1 - 6.7 / (clock.now - start), abs=1e-3)
    lines = ledger_lines(got)
    assert lines[0].startswith("restart 1 at 03:00:10: node 1 exited with code 137")
    assert lines[0].endswith("back 6.7s later, 5 step(s) lost")
    assert lines[1].startswith("goodput ") and "1 restart(s) of 2 used, 6.7s and 5 step(s)" \
        in lines[1]


def test_a_local_run_without_step_lines_counts_each_restart_the_runner_makes():
    clock = Clock()
    led = LocalLedger(max_restarts=2, clock=clock)
    assert led.summary(succeeded=True) is None  # no restart: nothing to say
    for _ in range(2):
        clock.now += 5
        led.exited(0, 143)  # no launcher line: its time of exit is the fault's
        led.restarting(0, 143)
    got = led.summary(succeeded=False)
    assert got["restartsUsed"] == 2, got
    assert [r["faultAt"][11:19] for r in got["restarts"]] == ["03:00:05", "03:00:10"]
    assert all("not resumed" in line for line in ledger_lines(got)[:2])


def test_a_local_run_counts_a_restart_in_process_once_for_all_its_nodes():
    clock = Clock()
    led = LocalLedger(max_restarts=3, clock=clock)
    for n in (5, 10):
        led.line(0, f"[rank 0] {step(n)}")
    clock.now += 1
    led.line(1, said(1))
    led.line(0, said(1, cause="worker rank 0 lost a peer", code=203))
    led.line(0, f"[rank 0] {step(3)}")  # no resume line: back when the steps went back
    clock.now += 4
    led.line(0, f"[rank 0] {step(4)}")
    got = led.summary(succeeded=True)
    (r,) = got["restarts"]
    assert (r["cause"], r["exitCode"], r["stepsLost"]) == (SAID_KILLED, 137, 8)
    assert r["secondsLost"] == 0.0
    led.line(1, "[rank 1] kdist.launch: " + in_process_line(2, 3, "x", 137))  # a worker's
    assert led.summary(succeeded=True)["restartsUsed"] == 1


def test_a_killed_node_launcher_is_one_restart_though_its_peer_restarted_in_process():
    """Node 1's launcher SIGKILLed, twice: node 0's launcher restarts its workers in process
    (their peer is gone), then the runner restarts every node. One fault, one restart, in
    time order: not "4 restart(s) of 2 used"."""
    clock = Clock()
    led = LocalLedger(max_restarts=2, clock=clock)
    for number in (1, 2):
        for n in range(1, 7):
            led.line(0, f"[rank 0] {step(n)}")
        clock.now += 10
        led.exited(1, 137)  # no last words: the launcher itself was killed
        clock.now += 2  # its workers die on their next write; then node 0's lose their peer
        led.line(0, said(number, 2, "worker rank 0 (node 0, local rank 0, pid 9) lost a "
                                    "peer", 203))
        clock.now += 10  # fail_grace_s: then the runner stops node 0 and restarts them all
        led.exited(0, 143)
        led.restarting(1, 137)
        clock.now += 3
        led.line(0, f"[rank 0] {step(4, 'resume')}")
    got = led.summary(succeeded=True)
    assert got["restartsUsed"] == 2, got
    faults = [r["faultAt"] for r in got["restarts"]]
    assert faults == sorted(faults) and faults[0][11:19] == "03:00:10", faults
    for r in got["restarts"]:
        assert r["cause"] == "node 1 exited with code 137: killed by SIGKILL (retryable)", r
        assert (r["exitCode"], r["resumedStep"]) == (137, 4)
        assert r["secondsLost"] == pytest.approx(15)


def test_client_run_local_hands_the_ledger_over_at_the_end(tmp_path, monkeypatch):
    import kdist
    from kdist.local import runner as local
    from kdist.shared.errors import UsageError
    from kdist.spec import validate_job
    from tests.unit.helpers import spec_with

    job = validate_job(spec_with(**{"spec.distributed": {"maxRestarts": 2}}))

    def run_nodes(argv, envs, *, ledger, **kwargs):  # what the runner tells its ledger
        ledger.line(0, f"[rank 0] {step(7)}")
        ledger.line(1, KILLED)
        ledger.exited(1, 137)
        ledger.restarting(1, 137)
        ledger.line(0, f"[rank 0] {step(4, 'resume')}")
        return 0

    monkeypatch.setattr(local, "run_nodes", run_nodes)
    monkeypatch.setattr(local, "_preflight", lambda job, root: None)
    monkeypatch.chdir(tmp_path)
    heard: list[dict] = []
    assert kdist.Client().run_local(job, on_ledger=heard.append) == 0
    (got,) = heard
    assert (got["restartsUsed"], got["restartsAllowed"], got["stepsLost"]) == (1, 2, 3)
    assert got["restarts"][0]["cause"].startswith("node 1 exited with code 137: killed by")
    with pytest.raises(UsageError, match="on_ledger: expected a function"):
        kdist.Client().run_local(job, on_ledger="print")


def test_a_later_reader_goes_on_from_the_ledger_kept_on_the_job():
    """`kdist status` (or a watch attached again) sees the exit the kept ledger already
    counts: it is that restart, not a new one, and the history is not written over."""
    kept = {"restarts": [{"cause": "rank 1 (pod p1) exited with code 137: killed",
                          "exitCode": 137, "faultAt": "2026-12-05T03:00:00.000Z",
                          "resumedAt": "2026-12-05T03:00:08.000Z", "lastStep": 50,
                          "resumedStep": 40, "secondsLost": 8.0, "stepsLost": 10}],
            "restartsUsed": 1}
    t = Tracker("unit-job", "d", clock=Clock())
    t.job_event("ADDED", {"kind": "Job", "metadata": {
        "name": "unit-job", "namespace": "d", "creationTimestamp": "2026-12-05T02:59:00Z",
        "annotations": {"kdist.dev/ledger": json.dumps(kept)}}, "spec": {}, "status": {}})
    gone = pod(1)
    gone["status"] = {"phase": "Failed", "containerStatuses": [{"name": "pytorch", "state": {
        "terminated": {"exitCode": 137, "reason": "Error",
                       "finishedAt": "2026-12-05T03:00:00Z"}}}]}
    t.pod_relist([gone])
    (r,) = t.state.ledger["restarts"]
    assert (r["cause"], r["secondsLost"], r["stepsLost"]) == (kept["restarts"][0]["cause"], 8.0,
                                                             10)
    # a new fault is a second restart, after the kept one
    t.ledger.failed("rank 0 (pod p0)", 137, "2026-12-05T03:05:00Z", 0.0, 90)
    assert len(t.ledger.restarts) == 2 and t.ledger.restarts[0].cause == r["cause"]


def test_the_watch_shows_and_writes_what_it_saw_after_reading_back_its_own_ledger():
    """The watch reads its own annotation back (a job event): what it sees next (the gang
    back) is what it shows and writes, not the copy it wrote before."""
    clock = Clock()
    t = Tracker("unit-job", "d", clock=clock)
    job = {"kind": "Job", "metadata": {"name": "unit-job", "namespace": "d",
                                       "creationTimestamp": "2026-12-05T02:59:00Z"},
           "spec": {}, "status": {}}
    t.job_event("ADDED", job)
    t.pod_event("ADDED", pod(0))
    t.pod_event("ADDED", pod(1))
    t.log_line("unit-job-0-x", step(50))
    t.log_line("unit-job-1-x", said(1))
    written = json.dumps(t.state.ledger)  # what the watch wrote: the restart open
    job["metadata"]["annotations"] = {"kdist.dev/ledger": written}
    t.job_event("MODIFIED", job)
    clock.now += 6
    t.log_line("unit-job-0-x", step(40, "resume"))
    (r,) = t.state.ledger["restarts"]
    assert (r["resumedStep"], r["stepsLost"], r["secondsLost"]) == (40, 10, 6.0), r


def test_the_watch_shows_each_spare_and_the_restart_one_ended():
    """A warm spare's pod (index 2 of a 2-node job) says it waits, then takes rank 1 after
    node 1 was lost: `status` shows it, and the open restart records it."""
    clock = Clock()
    t = Tracker("unit-job", "d", clock=clock)
    for rank in (0, 1, 2):
        t.pod_event("ADDED", pod(rank))
    t.log_line("unit-job-2-x", "kdist.launch: spare in slot 2: waiting at m:29500, holding "
                               "no rank")
    assert t.state.spares == {2: "free"}
    t.log_line("unit-job-0-x", step(10))
    t.log_line("unit-job-0-x", said(1, cause="node 1 lost (silent for 10 s): its launcher's "
                                              "heartbeat stopped (seen by node 0)", code=203))
    t.log_line("unit-job-2-x", "kdist.launch: spare in slot 2 takes node rank 1")
    assert t.state.spares == {2: "took rank 1"}
    assert t.state.to_dict()["spares"] == {"2": "took rank 1"}
    clock.now += 8
    t.log_line("unit-job-0-x", step(10, "resume"))
    (r,) = t.state.ledger["restarts"]
    assert r["spare"] == "slot 2 took rank 1" and "node 1 lost" in r["cause"]
    assert "; spare in slot 2 took rank 1; back 8.0s later" in ledger_lines(t.state.ledger)[0]


def test_the_ledger_says_what_the_gang_resumed_from_and_keeps_it():
    """DDP's resume line names its source (kdist.workloads.memory): the restart records it,
    status says it, and a reader of the kept ledger reads it back; a long or odd one is not
    kept (a worker's words)."""
    clock = Clock()
    led = LocalLedger(max_restarts=2, clock=clock)
    for n in range(1, 13):
        led.line(0, f"[rank 0] {step(n)}")
    led.exited(1, 137)
    led.restarting(1, 137)
    clock.now += 4
    source = "memory of rank 0, step 12"
    resume = {"event": "resume", "step": 12, "source": source, "memory_rank": 0, "rank": 1}
    led.line(1, f"[rank 1] {json.dumps(resume)}")
    got = led.summary(succeeded=True)
    (r,) = got["restarts"]
    assert (r["resumedFrom"], r["stepsLost"]) == (source, 0), r
    assert ledger_lines(got)[0].endswith(f"back 4.0s later (from the {source}), 0 step(s) lost")
    again = Ledger()
    assert again.adopt(got) and again.restarts[0].resumed_from == source
    odd = Ledger()
    odd.failed("node 1", 137, "2026-12-05T03:00:00Z", 0.0, 5)
    odd.stepped(5, 1.0, True, "x" * 65)
    assert "resumedFrom" not in odd.restarts[0].to_dict()
