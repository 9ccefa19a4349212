"""Native gang scheduling (distributed.gang): what is rendered, how the cluster is asked,
what the PodGroup's verdict tells `kdist status` and the watch."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from kdist.api.jobs import create
from kdist.kube import kinds
from kdist.kube.errors import Forbidden
from kdist.kube.watch.objects import gang_of, gang_state
from kdist.kube.watch.tracker import Tracker
from kdist.rendering import gang as G
from kdist.rendering import render
from kdist.rendering.addons import RULES
from kdist.shared.errors import ClusterError, SpecError, UsageError
from kdist.spec import validate_job
from tests.unit import restricted
from tests.unit.helpers import spec_with


def job(gang: str = "native", **changes: Any):
    return validate_job(spec_with(**{"spec.distributed": {"gang": gang},
                                     "metadata.namespace": "d", "spec.nodes": 3}, **changes))


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


# --- rendering ------------------------------------------------------------------------------


def test_native_renders_a_podgroup_of_every_pod_that_the_pods_name():
    objs = render(job(), None, None, "native")
    jobobj, podgroup = objs[0], objs[-1]
    assert [o["kind"] for o in objs] == ["Job", "Service", "PodGroup"]  # the Job first: owner
    assert podgroup["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert podgroup["metadata"]["name"] == "unit-job"
    assert podgroup["metadata"]["namespace"] == "d"
    assert podgroup["metadata"]["labels"]["kdist.dev/job-name"] == "unit-job"
    assert podgroup["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}}}
    assert pod_spec(jobobj)["schedulingGroup"] == {"podGroupName": "unit-job"}
    assert gang_of(jobobj) == "unit-job"
    assert kinds.of(podgroup) is kinds.PODGROUP
    # no Job-level scheduling: the Job controller leaves a template with a schedulingGroup
    # alone (KEP-5547), so kdist's PodGroup is the one the pods use
    assert "scheduling" not in jobobj["spec"]


def test_native_passes_the_api_schema_and_the_restricted_profile():
    objs = render(job(), None, None, "native")
    for obj in objs:
        kubernetes_validate.validate(obj, "1.37", strict=True)
    (spec,) = restricted.pod_specs(objs[0])
    assert restricted.violations(spec) == []


@pytest.mark.parametrize("gang", ["auto", "none"])
def test_without_a_cluster_auto_renders_no_gang_the_form_every_cluster_accepts(gang):
    objs = render(job(gang))
    assert [o["kind"] for o in objs] == ["Job", "Service"]
    assert "schedulingGroup" not in pod_spec(objs[0])
    assert gang_of(objs[0]) == ""


def test_the_spec_refuses_what_a_native_gang_cannot_be():
    with pytest.raises(SpecError, match="distributed.gang native needs backend indexed-job"):
        job(**{"spec.backend": "pytorchjob"})
    with pytest.raises(SpecError, match="distributed.gang native with scheduling.queue"):
        job(**{"spec.scheduling": {"queue": "team-a"}})
    with pytest.raises(SpecError, match="gang"):
        job("sometimes")
    overlay = {"spec": {"schedulingGroup": {"podGroupName": "mine"}}}
    with pytest.raises(SpecError, match="distributed.gang"):
        job("none", **{"spec.podTemplateOverlay": overlay})
    assert job().spec.distributed.gang == "native"
    assert validate_job(spec_with()).spec.distributed.gang == "auto"


def test_auto_is_native_only_where_served_and_neither_queued_nor_a_pytorchjob():
    assert G.resolve(job("auto"), served=True) == "native"
    assert G.resolve(job("auto"), served=False) == "none"
    assert G.resolve(job("none"), served=True) == "none"
    queued = job("auto", **{"spec.scheduling": {"queue": "team-a"}})
    assert G.resolve(queued, served=True) == "none"  # Kueue admits it whole already
    assert G.resolve(job("auto", **{"spec.backend": "pytorchjob"}), served=True) == "none"


# --- asking the cluster ---------------------------------------------------------------------


class FakeCluster:
    """Creates as an API server that serves PodGroups or not; `refuse` answers a PodGroup's
    create 403 (a Role without podgroups), its dry run too."""

    server = "https://fake:6443"

    def __init__(self, served: bool, refuse: bool = False, v1: bool = False) -> None:
        self.served, self.refuse, self.v1 = served, refuse, v1  # v1: GA's, not v1beta1
        self.discovered: list[str] = []
        self.created: list[list[dict[str, Any]]] = []
        self.asked: list[tuple[str, str]] = []  # dry-run creates: (kind, dryRun)
        self.probed: list[str] = []  # the restart-rules probe's dry runs, by plural

    def request(self, action, method, path, query=None, body=None):
        self.asked.append((body["kind"], (query or {}).get("dryRun", "")))
        if self.refuse and body["kind"] == "PodGroup":
            raise Forbidden(f"forbidden: create podgroups in namespace d: {self.REFUSED}")
        return copy.deepcopy(body)

    def ask(self, method, path, body=None, **query):  # the restart-rules probe: served
        self.probed.append(path.rsplit("/", 1)[1])
        return 201, copy.deepcopy(body)

    def serves(self, kind) -> bool:
        self.discovered.append(f"{kind.api_version} {kind.kind}")
        if kind in kinds.PODGROUPS:
            return self.served and (kind is kinds.PODGROUP_V1) == self.v1
        return False

    def create(self, objects, *, dry_run=False):
        self.created.append(objects)
        if self.refuse and any(o["kind"] == "PodGroup" for o in objects):
            raise ClusterError(f"forbidden: create podgroups in namespace d: {self.REFUSED}")
        return [copy.deepcopy(o) for o in objects], []

    REFUSED = 'podgroups.scheduling.k8s.io "unit-job" is forbidden: User "alice" cannot create'



@pytest.mark.parametrize(("served", "kinds_made"), [
    (True, ["Job", "Service", "PodGroup"]), (False, ["Job", "Service"])])
def test_auto_gangs_where_discovery_shows_podgroups(served, kinds_made):
    cluster = FakeCluster(served)
    created, _, notes = create(cluster, job("auto"), None, False)
    assert [o["kind"] for o in created] == kinds_made
    assert notes == []
    assert cluster.asked == ([("PodGroup", "All")] if served else [])
    assert bool(gang_of(created[0])) is served
    assert cluster.discovered == ["scheduling.k8s.io/v1 PodGroup",
                                  "scheduling.k8s.io/v1beta1 PodGroup"]


@pytest.mark.parametrize("v1", [True, False])
def test_the_podgroup_is_of_the_version_discovery_lists(v1):
    """v1 where discovery lists podgroups in scheduling.k8s.io/v1 (GA), else v1beta1 (1.37);
    v1beta1 is not asked where v1 is served."""
    cluster = FakeCluster(True, v1=v1)
    created, _, _ = create(cluster, job("auto"), None, False)
    want = "scheduling.k8s.io/v1" if v1 else "scheduling.k8s.io/v1beta1"
    (group,) = [o for o in created if o["kind"] == "PodGroup"]
    assert group["apiVersion"] == want
    assert kinds.of(group).api_version == want  # its create, owner patch and delete URLs
    assert cluster.discovered == ["scheduling.k8s.io/v1 PodGroup"] + (
        [] if v1 else ["scheduling.k8s.io/v1beta1 PodGroup"])


def test_render_without_a_cluster_keeps_v1beta1():
    (group,) = [o for o in render(job("native")) if o["kind"] == "PodGroup"]
    assert group["apiVersion"] == "scheduling.k8s.io/v1beta1"


def test_the_served_podgroup_version_prefers_v1():
    both, beta, none = ({kinds.PODGROUP_V1, kinds.PODGROUP}, {kinds.PODGROUP}, set())
    assert kinds.podgroup(both.__contains__) is kinds.PODGROUP_V1
    assert kinds.podgroup(beta.__contains__) is kinds.PODGROUP
    assert kinds.podgroup(none.__contains__) is None


def test_native_where_podgroups_are_not_served_is_refused_before_creating():
    cluster = FakeCluster(False)
    with pytest.raises(UsageError, match=r"spec.distributed.gang native: the cluster does not "
                                         r"serve PodGroups \(scheduling.k8s.io/v1 or "
                                         r"scheduling.k8s.io/v1beta1;"):
        create(cluster, job("native"), None, False)
    assert cluster.created == []


def test_a_refused_podgroup_sends_auto_without_a_gang_but_native_fails():
    """Asked by a dry run before the job: the job is created once, without a gang, and a
    note says why; native fails with nothing created."""
    import kdist.rendering

    renders: list[str] = []

    def counted(j, code=None, mode=None, gang=None, podgroup_api=G.API_VERSION):
        renders.append(gang)
        return render(j, code, mode, gang, podgroup_api)

    cluster = FakeCluster(True, refuse=True)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(kdist.rendering, "render", counted)
        created, _, (note,) = create(cluster, job("auto"), None, False)
    assert len(cluster.created) == 1 and gang_of(created[0]) == ""
    assert renders == [G.NONE] and cluster.probed == ["pods"]  # one render, one create
    assert [o["kind"] for o in created] == ["Job", "Service"]
    assert "PodGroup unit-job is refused (forbidden" in note and "pod by pod" in note
    native = FakeCluster(True, refuse=True)
    with pytest.raises(ClusterError, match="gang native: the PodGroup is refused: forbidden"):
        create(native, job("native"), None, False)
    assert native.created == []


def test_none_and_queued_jobs_never_ask_discovery():
    for j in (job("none"), job("auto", **{"spec.scheduling": {"queue": "q"}})):
        cluster = FakeCluster(True)
        created, _, _ = create(cluster, j, None, False)
        assert cluster.discovered == [] and cluster.asked == []
        assert all(o["kind"] != "PodGroup" for o in created)


def test_the_role_may_make_read_and_undo_podgroups():
    (rule,) = [r for r in RULES if r["apiGroups"] == ["scheduling.k8s.io"]]
    assert rule["resources"] == ["podgroups"]
    assert {"create", "get", "list", "watch", "delete"} <= set(rule["verbs"])


# --- status ---------------------------------------------------------------------------------


def _podgroup(status: str | None = None, message: str = "") -> dict[str, Any]:
    conditions = [] if status is None else [{
        "type": "PodGroupInitiallyScheduled", "status": status,
        "reason": "Scheduled" if status == "True" else "Unschedulable", "message": message}]
    return {"kind": "PodGroup", "metadata": {"name": "unit-job", "namespace": "d"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
            "status": {"conditions": conditions}}


def test_podgroup_verdicts():
    assert gang_state(_podgroup())[:2] == ("waiting", 3)
    status, minimum, words = gang_state(_podgroup("False", "0/1 nodes are available: 1 "
                                                  "Insufficient cpu."))
    assert (status, minimum) == ("unschedulable", 3)
    assert words == "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu."
    assert gang_state(_podgroup("True"))[0] == "placed"


def test_the_tracker_says_what_holds_the_gang_and_why_pods_wait(capsys):
    from kdist.cli.progress import print_status

    t = Tracker("unit-job", "d")
    t.job_event("ADDED", render(job(), None, None, "native")[0])
    assert t.state.gang == "unit-job" and t.state.phase == "Pending"
    assert t.feed("gang", "relist", [_podgroup()]) == []  # waiting: said by status, not warned
    assert t.state.gang_holds()
    why = "0/1 nodes are available: 1 Insufficient cpu."
    (warning,) = t.feed("gang", "MODIFIED", _podgroup("False", why))
    assert warning == ("job unit-job waits as a gang (PodGroup unit-job): the scheduler cannot "
                       f"place all 3 pods at once, so none starts: Unschedulable: {why}")
    assert t.feed("gang", "MODIFIED", _podgroup("False", why)) == []  # once
    assert t.state.to_dict()["gang"] == {"podGroup": "unit-job", "minCount": 3,
                                         "status": "unschedulable",
                                         "message": f"Unschedulable: {why}"}
    print_status(t.state)
    assert "job unit-job waits as a gang (PodGroup unit-job)" in capsys.readouterr().out
    t.feed("gang", "MODIFIED", _podgroup("True"))
    assert not t.state.gang_holds()
    print_status(t.state)
    assert "gang" not in capsys.readouterr().out


def test_a_job_without_a_gang_says_nothing_of_one():
    t = Tracker("unit-job", "d")
    t.job_event("ADDED", render(job("none"))[0])
    assert t.state.gang == "" and not t.state.gang_holds()
    assert t.state.to_dict()["gang"] is None


def _pending(name: str, rank: int, message: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {
        "name": name, "namespace": "d", "uid": f"uid-{name}",
        "labels": {"kdist.dev/job-name": "unit-job", "batch.kubernetes.io/job-completion-index":
                   str(rank)},
        "annotations": {"batch.kubernetes.io/job-completion-index": str(rank)}},
        "spec": {}, "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": message}]}}


def test_a_gangs_echo_of_incomplete_is_not_a_scheduling_failure():
    """As kube-scheduler v1.37 words it (seen on the test cluster): the pod that does not
    fit says why; its gang's others say only that the gang is incomplete."""
    t = Tracker("unit-job", "d")
    t.job_event("ADDED", render(job(), None, None, "native")[0])
    why = "0/1 nodes are available: 1 Insufficient cpu."
    warned = t.feed("pods", "ADDED", _pending("unit-job-0-a", 0, why))
    warned += t.feed("pods", "ADDED", _pending(
        "unit-job-1-b", 1, "minCount (3) cannot be satisfied: 0 scheduled, 1 remaining"))
    warned += t.feed("pods", "ADDED", _pending(
        "unit-job-2-c", 2, "pod group is unschedulable, minCount (3) cannot be satisfied: 1 "
        "scheduled, 0 remaining, pod group preemption: No preemption victims found"))
    assert [w for w in warned if "FailedScheduling" in w] == [
        f"FailedScheduling: rank 0 (pod unit-job-0-a): {why}"], warned
