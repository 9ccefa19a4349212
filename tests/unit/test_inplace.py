"""Restarts in place (distributed.restartMode): what is rendered, how the cluster is asked,
and how the launcher counts and bounds its own restarts."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from kdist.api.jobs import create
from kdist.kube.watch.objects import restart_mode_of
from kdist.kube.watch.tracker import Tracker
from kdist.rendering import render
from kdist.rendering import restarts as R
from kdist.shared import exitcodes
from kdist.shared.errors import ClusterError, SpecError, UsageError
from kdist.spec import validate_job
from tests.unit import restricted
from tests.unit.helpers import spec_with

ROOT = Path(__file__).resolve().parents[2]


def job(mode: str = "inPlace", **changes: Any):
    return validate_job(spec_with(**{"spec.distributed": {"restartMode": mode,
                                                          "maxRestarts": 2}}, **changes))


def container(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]["containers"][0]


# --- rendering ------------------------------------------------------------------------------


def test_in_place_renders_the_restart_rule_on_every_retryable_code():
    jobobj, _svc = render(job())
    c = container(jobobj)
    assert c["restartPolicy"] == "Never"
    (rule,) = c["restartPolicyRules"]
    assert rule["action"] == "RestartAllContainers"
    assert rule["exitCodes"]["operator"] == "In"
    codes = rule["exitCodes"]["values"]
    assert {137, 143, exitcodes.PEER_LOST, exitcodes.HUNG} <= set(codes)
    assert all(exitcodes.is_retryable(code) for code in codes)
    assert not set(codes) & set(exitcodes.CODE_ERRORS)
    assert exitcodes.RESTARTS_SPENT not in codes
    # the launcher bounds restarts: its "spent" code fails the job, as code errors do
    fail = jobobj["spec"]["podFailurePolicy"]["rules"][1]
    assert fail["action"] == "FailJob"
    assert exitcodes.RESTARTS_SPENT in fail["onExitCodes"]["values"]
    assert restart_mode_of(jobobj) == "inPlace"
    env = {e["name"]: e.get("value") for e in c["env"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in jobobj["spec"]["template"]["spec"]["volumes"]}
    assert mounts[R.VOLUME] == env["KDIST_RESTART_DIR"]
    assert "emptyDir" in volumes[R.VOLUME]  # kept by an in-place restart, per pod


def test_in_place_passes_the_api_schema_and_the_restricted_profile():
    for obj in render(job()):
        kubernetes_validate.validate(obj, "1.37", strict=True)
    (pod_spec,) = restricted.pod_specs(render(job())[0])
    assert restricted.violations(pod_spec) == []


@pytest.mark.parametrize("mode", ["auto", "recreate"])
def test_without_a_cluster_auto_renders_recreate_the_form_every_cluster_accepts(mode):
    jobobj, _svc = render(job(mode))
    c = container(jobobj)
    assert "restartPolicyRules" not in c and "restartPolicy" not in c
    assert "KDIST_RESTART_DIR" not in {e["name"] for e in c["env"]}
    assert restart_mode_of(jobobj) == "recreate"


def test_in_place_on_a_pytorchjob_is_refused_naming_the_field():
    with pytest.raises(SpecError, match="restartMode inPlace needs backend indexed-job"):
        job(**{"spec.backend": "pytorchjob"})
    assert R.resolve(job("auto", **{"spec.backend": "pytorchjob"}), cluster=True) == "recreate"


def test_an_overlay_may_not_set_the_restart_rules():
    overlay = {"spec": {"containers": [{"name": "pytorch", "restartPolicyRules": []}]}}
    with pytest.raises(SpecError, match="restartMode"):
        validate_job(spec_with(**{"spec.podTemplateOverlay": overlay}))


# --- asking the cluster ---------------------------------------------------------------------


class FakeCluster:
    """An API server with the feature on ("keep"), its gate off ("drop": a disabled field
    is dropped, not refused), the action unknown ("refuse"), a Role that may not create
    pods or jobs ("forbidden") or a server that fails ("failing"). It answers the probe's
    dry runs (`ask`) and the creates, and counts both."""

    server = "https://fake:6443"

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.asked: list[tuple[str, str, dict[str, Any]]] = []
        self.created: list[list[dict[str, Any]]] = []

    def _refused(self, obj: dict[str, Any]) -> bool:
        return self.answer == "refuse" and "restartPolicyRules" in str(obj)

    def _answer(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        spec = obj["spec"].get("template", {}).get("spec") or obj["spec"]
        if self.answer == "drop":
            for c in spec.get("containers", []):
                c.pop("restartPolicyRules", None)
                c.pop("restartPolicy", None)
        return obj

    def serves(self, kind) -> bool:  # no PodGroups: distributed.gang auto is none here
        return False

    def ask(self, method, path, body=None, **query):
        self.asked.append((method, path, query))
        if self.answer == "forbidden":
            return 403, {"message": f"forbidden: cannot create {path.rsplit('/', 1)[1]}"}
        if self.answer == "failing":
            return 503, {"message": "etcdserver: request timed out"}
        if self._refused(body):
            return 422, {"message": REFUSAL}
        return 201, self._answer(body)

    def create(self, objects, *, dry_run=False):
        self.created.append(objects)
        if self._refused(objects[0]):
            raise ClusterError(REFUSAL)
        return [self._answer(o) for o in objects], []


REFUSAL = ('job.batch/unit-job in namespace d is invalid: spec.template.spec.containers[0]'
           '.restartPolicyRules[0].action: Unsupported value: "RestartAllContainers"')


@pytest.fixture
def renders(monkeypatch) -> list[str]:
    """The restart mode of each render `create` makes."""
    import kdist.rendering

    made: list[str] = []

    def counted(j, code=None, mode=None, *args: Any, **kwargs: Any):
        made.append(mode)
        return render(j, code, mode, *args, **kwargs)

    monkeypatch.setattr(kdist.rendering, "render", counted)
    return made


@pytest.mark.parametrize(("answer", "mode", "probes"), [
    ("keep", "inPlace", ["pods"]), ("drop", "recreate", ["pods"]),
    ("refuse", "recreate", ["pods"]), ("forbidden", "recreate", ["pods", "jobs"]),
    ("failing", "recreate", ["pods"])])
def test_auto_asks_the_probe_first_then_renders_once_and_creates_once(answer, mode, probes,
                                                                     renders):
    """No version string: check's probe (a dry-run pod, else a Job) decides before the
    render; served renders in place, dropped or refused recreate; where the probe cannot
    tell, recreate (the form every cluster accepts) and a note says why."""
    cluster = FakeCluster(answer)
    created, _, notes = create(cluster, job("auto", **{"metadata.namespace": "d"}), None,
                               False)
    assert restart_mode_of(created[0]) == mode
    assert [(m, p.rsplit("/", 1)[1], q["dryRun"]) for m, p, q in cluster.asked] == \
        [("POST", p, "All") for p in probes]
    assert renders == [mode] and len(cluster.created) == 1
    if answer in ("forbidden", "failing"):
        (note,) = notes
        assert "restart rules: could not tell" in note and "recreating its pods" in note
    else:
        assert notes == []


def test_in_place_asked_of_a_cluster_that_does_not_serve_it_is_refused_before_creating(renders):
    cluster = FakeCluster("drop")
    with pytest.raises(UsageError, match=r"restartMode inPlace: container restartPolicyRules "
                                         "are not served"):
        create(cluster, job("inPlace", **{"metadata.namespace": "d"}), None, False)
    ((method, path, query),) = cluster.asked
    assert (method, query["dryRun"]) == ("POST", "All") and path.endswith("/pods")
    assert cluster.created == [] and renders == []
    refusing = FakeCluster("refuse")
    with pytest.raises(UsageError, match="restartPolicyRules with the RestartAllContainers "
                                         "action are refused"):
        create(refusing, job("inPlace", **{"metadata.namespace": "d"}), None, False)
    unknown = FakeCluster("forbidden")
    with pytest.raises(ClusterError, match="restartMode inPlace: could not tell"):
        create(unknown, job("inPlace", **{"metadata.namespace": "d"}), None, False)
    assert refusing.created == unknown.created == [] and renders == []
    served = FakeCluster("keep")
    created, _, _ = create(served, job("inPlace", **{"metadata.namespace": "d"}), None, False)
    assert restart_mode_of(created[0]) == "inPlace" and renders == ["inPlace"]


def test_recreate_asks_nothing(renders):
    cluster = FakeCluster("refuse")
    created, _, _ = create(cluster, job("recreate", **{"metadata.namespace": "d"}), None, False)
    assert restart_mode_of(created[0]) == "recreate" and cluster.asked == []
    assert renders == ["recreate"] and len(cluster.created) == 1


# --- status ---------------------------------------------------------------------------------


def test_status_reads_the_mode_from_the_job():
    from kdist.cli.progress import restarts_text

    jobobj = render(job(**{"metadata.namespace": "d"}), None, "inPlace")[0]
    t = Tracker("unit-job", "d")
    t.job_event("ADDED", jobobj)
    assert t.state.restart_mode == "inPlace"
    assert t.state.to_dict()["restartMode"] == "inPlace"
    assert restarts_text(t.state, ", ") == ", restart 0 of 2 (in place)"


# --- the launcher ---------------------------------------------------------------------------

KILL_SELF = "import os, signal; print('restart', os.environ['KDIST_RESTART_COUNT'], " \
            "flush=True); os.kill(os.getpid(), signal.SIGKILL)"


def launch(tmp_path: Path, restart_dir: Path, max_restarts: int, failures: str = "0",
           workers: str = "0"):
    """One launcher start in a pod restarting in place; ``workers``: KDIST_RESTART_WORKERS
    (``0`` by default: the container's restarts are counted here, not the workers')."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KDIST_")},
           "KDIST_RESTART_WORKERS": workers,
           "KDIST_JOB_NAME": "t", "KDIST_NNODES": "1", "KDIST_NPROC_PER_NODE": "1",
           "KDIST_DIST_BACKEND": "gloo", "KDIST_MAX_RESTARTS": str(max_restarts),
           "KDIST_INDEX_FAILURES": failures, "KDIST_RESTART_DIR": str(restart_dir),
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "kdist.launch", "--", "python", "-c",
                           KILL_SELF], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.timeout(120)
def test_the_launcher_counts_its_starts_and_ends_the_job_once_restarts_are_spent(tmp_path):
    """Each start in the same pod (the same emptyDir) is a restart in place; with
    maxRestarts used, the retryable exit becomes RESTARTS_SPENT and names the failure."""
    where = tmp_path / "restarts"
    where.mkdir()
    first = launch(tmp_path, where, max_restarts=1)
    assert first.returncode == 137, first.stderr
    # The launcher's lines go out on stdout with its workers' (kdist.runtime.agent.say).
    assert "restart 0" in first.stdout and "restart 0 of 1 allowed" in first.stdout
    second = launch(tmp_path, where, max_restarts=1)  # the kubelet restarted it in place
    assert "restart 1" in second.stdout  # what the worker sees (TORCHELASTIC_RESTART_COUNT too)
    assert second.returncode == exitcodes.RESTARTS_SPENT, second.stderr
    last = [line for line in second.stdout.splitlines() if line.startswith("kdist.launch:")][-1]
    assert "no restart left (1 of maxRestarts=1 used)" in last
    assert "killed by SIGKILL" in last and "exit 137" in last


@pytest.mark.timeout(120)
def test_one_launcher_restarts_its_workers_then_ends_the_job_and_counts_it_for_later(tmp_path):
    """Restarts in process (the default): the same launcher starts the workers again,
    tells them restart 1, and leaves the count where a container restart would read it."""
    where = tmp_path / "restarts"
    where.mkdir()
    out = launch(tmp_path, where, max_restarts=1, workers="")
    workers = [line for line in out.stdout.splitlines() if not line.startswith("kdist.launch:")]
    assert " ".join(workers).split() == ["restart", "0", "restart", "1"], out.stdout
    assert "restarting this node's workers (restart 1 of 1, in process)" in out.stdout
    assert out.returncode == exitcodes.RESTARTS_SPENT, out.stderr
    assert (where / "starts").read_text() == "2"


@pytest.mark.timeout(120)
def test_a_replaced_pods_count_starts_from_its_index_failures(tmp_path):
    """The Job controller's failures of the index (a deleted pod's replacement) count too:
    a fresh emptyDir with one failure is restart 1, as its survivors are."""
    where = tmp_path / "fresh"
    where.mkdir()
    out = launch(tmp_path, where, max_restarts=3, failures="1")
    assert "restart 1" in out.stdout and out.returncode == 137, out.stderr


def _pod(restarts: int, state: dict[str, Any], last: dict[str, Any] | None = None):
    return {"metadata": {"name": "unit-job-0-x", "uid": "u0", "creationTimestamp": "t",
                         "labels": {"kdist.dev/job-name": "unit-job",
                                    "batch.kubernetes.io/job-completion-index": "0"}},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "pytorch", "restartCount": restarts, "state": state,
                 "lastState": {"terminated": last} if last else {}}]}}


def test_the_kubelets_record_of_an_in_place_restart_is_no_exit():
    """After RestartAllContainers the kubelet leaves exit 137 with no finishedAt on every
    container it removed, whatever its own exit was: the exit the watch saw is kept, the
    kubelet's record is not taken for one."""
    t = Tracker("unit-job", "d")
    said = "kdist.launch: exit barrier: ...; exiting 203: lost a peer (retryable)"
    seen = t.pod_event("MODIFIED", _pod(0, {"terminated": {
        "exitCode": 203, "reason": "Error", "finishedAt": "2026-12-05T02:53:45Z",
        "message": said}}))
    assert any("exited with code 203" in w and "lost a peer" in w for w in seen), seen
    after = t.pod_event("MODIFIED", _pod(1, {"running": {"startedAt": "s"}}, {
        "exitCode": 137, "reason": "RestartingAllContainers", "finishedAt": None,
        "message": "The container is removed because RestartAllContainers in place"}))
    assert after == ["rank 0 (pod unit-job-0-x): container pytorch restarted in place (1x)"]
    assert [f.exit_code for f in t.state.failures] == [203]
    assert t.state.ranks[0].restarts == 1


def test_an_in_place_restart_whose_exit_the_watch_missed_is_still_in_the_ledger():
    """The kubelet may restart a pod's containers in place between two of its updates the
    watch reads: no terminated state is ever seen, only the restart count and the kubelet's
    record. The restart still counts (once) in the goodput ledger; the failures list keeps
    only exits really seen."""
    t = Tracker("unit-job", "d")
    t.pod_event("ADDED", _pod(0, {"running": {"startedAt": "s"}}))
    record = {"exitCode": 137, "reason": "RestartingAllContainers", "finishedAt": None}
    t.pod_event("MODIFIED", _pod(1, {"running": {"startedAt": "s2"}}, record))
    t.pod_event("MODIFIED", _pod(1, {"running": {"startedAt": "s2"}}, record))  # again: once
    (r,) = t.ledger.restarts
    assert r.exit_code == 137 and "restarted in place before its exit was seen" in r.cause
    assert t.state.ledger["restartsUsed"] == 1 and t.state.failures == []
    # Seen the usual way (the exit, then the restart), it is not counted twice.
    seen = Tracker("unit-job", "d")
    seen.pod_event("MODIFIED", _pod(0, {"terminated": {
        "exitCode": 137, "reason": "Error", "finishedAt": "2026-12-05T02:53:45Z"}}))
    seen.pod_event("MODIFIED", _pod(1, {"running": {"startedAt": "s2"}}, record))
    assert len(seen.ledger.restarts) == 1 and "before its exit" not in seen.ledger.restarts[0].cause


def test_a_restart_in_process_is_a_gang_restart_in_the_ledger_and_on_every_rank():
    """No pod shows a restart in process: the launchers' lines do. Both nodes say it; the
    kill is the cause, the lost peer its echo; a late echo after the gang is back is not
    a second restart."""
    from kdist.shared.ledger import in_process_line

    now = [1e9]
    t = Tracker("unit-job", "d", clock=lambda: now[0])
    for rank in (0, 1):
        pod = _pod(0, {"running": {"startedAt": "s"}})
        pod["metadata"].update(name=f"unit-job-{rank}-x", uid=f"u{rank}")
        pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = str(rank)
        t.pod_event("ADDED", pod)
    t.log_line("unit-job-0-x", '{"event": "step", "step": 50}')
    peer = "kdist.launch: " + in_process_line(1, 2, "worker rank 0 (node 0, ...) exited with "
                                             "code 203: RuntimeError: ...", 203)
    kill = "kdist.launch: " + in_process_line(
        1, 2, "worker rank 1 (node 1, local rank 0, pid 7) was killed by SIGKILL", 137)
    t.log_line("unit-job-0-x", peer)
    t.log_line("unit-job-1-x", kill)
    now[0] += 6.5
    t.log_line("unit-job-0-x", '{"event": "resume", "step": 40}')
    t.log_line("unit-job-0-x", peer)  # late: the gang is back already
    (r,) = t.ledger.restarts
    assert r.cause.startswith("rank 1 (pod unit-job-1-x): worker rank 1 (node 1"), r.cause
    assert r.exit_code == 137 and r.seconds_lost == pytest.approx(6.5)
    assert (r.last_step, r.resumed_step) == (50, 40)
    assert [t.state.ranks[k].restarts for k in (0, 1)] == [1, 1]
    assert t.state.ledger["restartsUsed"] == 1


def test_a_status_read_counts_the_ledgers_restarts_on_every_rank():
    """`kdist status` (no logs read) knows restarts in process from the job's ledger."""
    import json as _json

    t = Tracker("unit-job", "d")
    t.pod_event("ADDED", _pod(0, {"running": {"startedAt": "s"}}))
    ledger = {"restarts": [{"cause": "x", "exitCode": 137}], "restartsUsed": 1}
    t.job_event("ADDED", {"kind": "Job", "metadata": {
        "name": "unit-job", "namespace": "d", "creationTimestamp": "2026-12-05T03:00:00Z",
        "annotations": {"kdist.dev/ledger": _json.dumps(ledger)}}, "spec": {}, "status": {}})
    assert t.state.ranks[0].restarts == 1


def test_a_spent_lost_peer_is_not_blamed_before_the_spent_kill():
    from kdist.kube.watch.state import Failure

    t = Tracker("unit-job", "d")
    t.state.failures = [
        Failure(0, "p0", 205, "Error", "2026-12-05T02:53:45Z",
                "kdist.launch: no restart left ...; the failure: exit barrier ... "
                "(exit 203: lost a peer (retryable))"),
        Failure(1, "p1", 205, "Error", "2026-12-05T02:53:45Z",
                "kdist.launch: no restart left ...; the failure: worker rank 1 ... "
                "(exit 137: killed by SIGKILL (retryable))")]
    assert t.state.first_failure().rank == 1


# --- the goodput ledger ---------------------------------------------------------------------


def test_the_ledger_counts_a_restart_from_its_fault_to_the_resumed_step():
    from kdist.kube.watch.ledger import Ledger

    led = Ledger()
    led.failed("rank 1 (pod p1)", 137, "2026-12-05T03:00:00Z", now=1e9, last_step=50)
    # the peer's lost-peer exit is the echo, not the cause; old lines still arrive
    led.failed("rank 0 (pod p0)", 203, "2026-12-05T03:00:01Z", now=1e9, last_step=51)
    led.stepped(51, now=1e9, resumed=False)
    led.stepped(40, now=1796439608.5, resumed=True)  # 8.5 s after the fault
    led.stepped(41, now=1796439609.0, resumed=False)
    (r,) = led.restarts
    assert r.cause == "rank 1 (pod p1) exited with code 137: killed by SIGKILL (retryable)"
    assert (r.last_step, r.resumed_step, r.steps_lost) == (51, 40, 11)
    assert r.seconds_lost == pytest.approx(8.5)
    # a second fault is a second restart; a script without resume lines is back when its
    # steps go back (from 0 without a checkpoint)
    led.failed("rank 0 (pod p0)", 204, None, now=1796439700.0, last_step=90)
    led.stepped(1, now=1796439710.0, resumed=False)
    total = led.summary(max_restarts=3, started=1796439500.0, now=1796439800.0)
    assert [x["stepsLost"] for x in total["restarts"]] == [11, 90]
    assert (total["restartsUsed"], total["restartsAllowed"]) == (2, 3)
    assert total["secondsLost"] == pytest.approx(18.5)
    assert total["goodput"] == pytest.approx(1 - 18.5 / 300, abs=1e-3)


def test_status_reads_the_ledger_a_watch_left_on_the_job():
    import json

    from kdist.cli.progress import ledger_lines
    from kdist.kube.watch.ledger import ANNOTATION, Ledger

    led = Ledger()
    led.failed("rank 1 (pod p1)", 137, "2026-12-05T03:00:00Z", now=0, last_step=50)
    led.stepped(40, now=1796439608.5, resumed=True)
    jobobj = render(job(**{"metadata.namespace": "d"}), None, "inPlace")[0]
    jobobj["metadata"]["annotations"] = {ANNOTATION: json.dumps(
        led.summary(2, 1796439500.0, 1796439700.0))}
    t = Tracker("unit-job", "d")
    t.job_event("ADDED", jobobj)
    got = t.state.to_dict()["ledger"]
    assert got["restartsUsed"] == 1 and got["stepsLost"] == 10, got
    lines = ledger_lines(got)
    assert lines[0].startswith("restart 1 at 03:00:00: rank 1 (pod p1) exited with code 137")
    assert "back 8.5s later, 10 step(s) lost" in lines[0]
    assert lines[1].startswith("goodput 95.8%: 1 restart(s) of 2 used, 8.5s and 10 step(s)")
    jobobj["metadata"]["annotations"] = {ANNOTATION: "{not json"}
    t2 = Tracker("unit-job", "d")
    t2.job_event("ADDED", jobobj)
    assert t2.state.ledger is None


def test_the_watch_keeps_its_ledger_from_failures_and_log_lines():
    t = Tracker("unit-job", "d")
    t.job_event("ADDED", render(job(**{"metadata.namespace": "d"}), None, "inPlace")[0])
    t.log_line("unit-job-0-x", '{"event": "step", "step": 50}')  # no pod yet: ignored
    t.pod_event("MODIFIED", _pod(0, {"running": {"startedAt": "s"}}))
    t.log_line("unit-job-0-x", '{"event": "step", "step": 50}')
    t.pod_event("MODIFIED", _pod(0, {"terminated": {
        "exitCode": 137, "reason": "Error", "finishedAt": "2026-12-05T03:00:00Z"}}))
    t.log_line("unit-job-0-x", '{"event": "resume", "step": 40}')
    got = t.state.ledger
    assert got["restartsUsed"] == 1 and got["restarts"][0]["stepsLost"] == 10, got
    assert got["restarts"][0]["exitCode"] == 137


def test_a_restart_of_a_script_without_step_lines_is_not_lost_time_once_the_job_succeeded():
    from kdist.cli.progress import ledger_lines
    from kdist.kube.watch.ledger import Ledger

    led = Ledger()
    led.failed("rank 0 (pod p0)", 204, None, now=1000.0, last_step=None)
    running = led.summary(1, started=900.0, now=1100.0)
    assert running["secondsLost"] == 100.0 and "not resumed" in ledger_lines(running)[0]
    done = led.summary(1, started=900.0, now=1100.0, succeeded=True)
    assert done["secondsLost"] == 0.0 and done["goodput"] == 1.0
    assert ledger_lines(done)[0].endswith("hung: no progress within progressTimeoutSeconds "
                                          "(retryable); back: no step line said when")
