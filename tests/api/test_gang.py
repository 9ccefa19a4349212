"""Native gang scheduling (distributed.gang) over the wire: discovery decides auto, a
dry-run create of the PodGroup comes before the Job (a refusal leaves nothing to undo),
the PodGroup is created after the Job and owned by it, `status` says what holds the pods,
and `delete` leaves nothing of it. A name already taken by an object kdist did not make
is named with its kind and owner."""

from __future__ import annotations

import pytest

from tests.api import objects
from tests.api.checks import assert_calls, error_line
from tests.api.test_interrupts import with_workdir
from tests.api.test_verbs import GANG, JOBS, PROBE, SVCS

pytestmark = pytest.mark.timeout(60)
FAKEAPI_OPTIONS = {"podgroups": True}
GROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups"


def test_auto_makes_a_podgroup_owned_by_the_job_that_every_pod_names(api, kdist, spec):
    out = kdist("submit", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    assert_calls(out, [PROBE, *GANG, ("POST", GROUPS), ("POST", JOBS), ("POST", SVCS),
                       ("POST", GROUPS)])
    probe = next(r for r in out.requests if r.path == GROUPS)
    assert probe.query.get("dryRun") == "All", out.describe()
    job = api.store.get_stored("jobs", "demo")
    group = api.store.get_stored("podgroups", "demo")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    (owner,) = group["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Job", job["metadata"]["uid"])
    assert job["spec"]["template"]["spec"]["schedulingGroup"] == {"podGroupName": "demo"}
    assert "scheduling: as a gang (podgroup/demo: all pods at once or none)" in out.stdout


def test_status_says_what_holds_the_gang_and_delete_takes_it(api, kdist, spec):
    assert kdist("submit", "--no-wait", str(spec)).code == 0
    group = api.store.get_stored("podgroups", "demo")
    why = "0/1 nodes are available: 1 Insufficient cpu."
    api.store.update(dict(group, status={"conditions": [
        {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable",
         "message": why, "lastTransitionTime": "2025-01-02T03:04:00Z"}]}))
    out = kdist("status", "demo")
    assert out.code == 0, out.describe()
    assert ("job demo waits as a gang (PodGroup demo): the scheduler cannot place all 2 pods "
            f"at once, so none starts: Unschedulable: {why}") in out.stdout, out.describe()
    out = kdist("delete", "demo")
    assert out.code == 0, out.describe()
    assert api.store.alive("podgroups") == [], "the PodGroup goes with its job"


def test_native_needs_podgroups_served(api, kdist, tmp_path):
    api.podgroups = False
    path = objects.job_yaml(tmp_path / "native.yaml")
    path.write_text(path.read_text().replace("distributed: {backend: gloo}",
                                             "distributed: {backend: gloo, gang: native}"))
    out = kdist("submit", "--no-wait", str(path))
    error_line(out, 2, "spec.distributed.gang native: the cluster does not serve PodGroups "
                       "(scheduling.k8s.io/v1 or scheduling.k8s.io/v1beta1;")
    assert api.store.alive("jobs") == []


def refusal(out, *contains: str) -> str:
    """The one warning line of a gang fallback."""
    assert out.code == 0, out.describe()
    lines = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1, out.describe()
    for text in contains:
        assert text in lines[0], out.describe()
    return lines[0]


@pytest.mark.parametrize(("code", "said"), [(403, "forbidden"), (404, "404")])
def test_a_refused_podgroup_leaves_nothing_to_undo(api, kdist, spec, code, said):
    """A Role without podgroups (403), or an API that lists them in discovery but answers
    404 to a create: the job goes without a gang, created once; nothing is deleted (a real
    API server still holds a deleted Job a while: a second create of it would collide)."""
    api.fail(code, method="POST", path=f"{GROUPS}$")
    out = kdist("submit", "--no-wait", str(spec))
    refusal(out, "PodGroup demo", said, "pod by pod")
    assert_calls(out, [PROBE, *GANG, ("POST", GROUPS), ("POST", JOBS), ("POST", SVCS)])
    assert not [r for r in out.requests if r.method == "DELETE"], out.describe()
    job = api.store.get_stored("jobs", "demo")
    assert "schedulingGroup" not in job["spec"]["template"]["spec"], job
    assert "as a gang" not in out.stdout, out.describe()


def test_native_with_a_refused_podgroup_makes_nothing(api, kdist, tmp_path):
    api.fail(403, method="POST", path=f"{GROUPS}$")
    path = objects.job_yaml(tmp_path / "native.yaml")
    path.write_text(path.read_text().replace("distributed: {backend: gloo}",
                                             "distributed: {backend: gloo, gang: native}"))
    out = kdist("submit", "--no-wait", str(path))
    error_line(out, 3, "forbidden", "podgroups")
    assert not [r for r in out.requests if r.path in (JOBS, SVCS)], out.describe()


def test_status_shows_the_rest_when_the_podgroup_may_not_be_read(api, kdist, spec):
    assert kdist("submit", "--no-wait", str(spec)).code == 0
    api.fail(403, method="GET", path=f"{GROUPS}/demo")
    out = kdist("status", "demo")
    assert out.code == 0, out.describe()
    assert "PodGroup demo could not be read: forbidden" in out.stdout, out.describe()
    assert "demo-0" in out.stdout or "RANK" in out.stdout, out.describe()
    out = kdist("status", "demo", "-o", "json")
    assert out.code == 0, out.describe()
    assert '"unreadable"' in out.stdout, out.describe()


FOREIGN = {"labels": {"app.kubernetes.io/managed-by": "helm"},
           "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                "uid": "u-web"}],
           "managedFields": [{"manager": "helm", "operation": "Update"}]}


def test_a_podgroup_kdist_did_not_make_is_named_with_its_owner(api, kdist, spec):
    api.add({"kind": "PodGroup", "metadata": {"name": "demo", **FOREIGN},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 9}}}})
    out = kdist("submit", "--no-wait", str(spec))
    line = error_line(out, 3, "podgroup", "demo", "Deployment/web", "helm", "metadata.name")
    assert "--replace" not in line and "job demo already exists" not in line, line
    assert api.store.alive("jobs") == [], "nothing is created beside another's PodGroup"


def test_a_configmap_kdist_did_not_make_is_named_with_its_owner(api, kdist, tmp_path):
    spec = with_workdir(tmp_path)

    def squat(job: dict) -> None:  # the code ConfigMap's name is taken, by someone else
        for volume in job["spec"]["template"]["spec"].get("volumes") or []:
            for source in (volume.get("projected") or {}).get("sources") or []:
                if "configMap" in source:
                    api.add({"kind": "ConfigMap", "data": {},
                             "metadata": {"name": source["configMap"]["name"], **FOREIGN}})
            if "configMap" in volume:
                api.add({"kind": "ConfigMap", "data": {},
                         "metadata": {"name": volume["configMap"]["name"], **FOREIGN}})

    api.after_create["jobs"] = squat
    out = kdist("submit", "--no-wait", str(spec))
    line = error_line(out, 3, "configmap", "Deployment/web", "helm", "metadata.name")
    assert "--replace" not in line and "job demo already exists" not in line, line
    assert api.store.alive("jobs") == [], "the submission is undone"


def test_the_watch_goes_on_when_the_podgroup_may_not_be_read(api, kdist, spec):
    """A Role that may create PodGroups but not list or watch them: submit's watch follows
    the job to its end all the same, and says once that the PodGroup could not be read."""
    from tests.api.test_verbs import _finish

    api.fail(403, method="GET", path=f"{GROUPS}")
    api.on_watch["jobs"] = lambda: _finish(api, api.store.get_stored("jobs", "demo"), (0, 0))
    out = kdist("submit", "--timeout", "10", str(spec))
    assert out.code == 0, out.describe()
    assert "job demo succeeded" in out.stdout, out.describe()
    said = [line for line in (out.stdout + out.stderr).splitlines()
            if "PodGroup demo could not be read" in line]
    assert len(said) == 1 and "forbidden" in said[0], out.describe()


def test_submitting_a_gang_job_that_exists_says_the_job_exists(api, kdist, spec):
    """Its PodGroup (asked first) answers 409: the words are the job's, as without a gang."""
    assert kdist("submit", "--no-wait", str(spec)).code == 0
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "job demo already exists in namespace default",
               "use --replace or `kdist delete demo`")
    assert not [r for r in out.requests if r.method == "POST" and r.path == JOBS]


def test_a_podgroup_left_by_kdist_without_its_job_is_named(api, kdist, spec):
    api.add({"kind": "PodGroup", "metadata": {"name": "demo", "labels": objects.labels("demo")},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}})
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "podgroup.scheduling.k8s.io/demo in namespace default already exists",
               "left by an earlier submission of job demo",
               "kubectl -n default delete podgroup.scheduling.k8s.io demo")


GROUPS_V1 = "/apis/scheduling.k8s.io/v1/namespaces/default/podgroups"


@pytest.fixture
def podgroups_v1(monkeypatch):
    """The API server of a Kubernetes whose PodGroups are GA: served in scheduling.k8s.io/v1
    alone (its discovery lists them there, not in v1beta1)."""
    from tests.api import routes

    monkeypatch.setitem(routes.RESOURCES, "podgroups", ("scheduling.k8s.io/v1", "PodGroup"))
    monkeypatch.setitem(routes.KINDS, "PodGroup", ("scheduling.k8s.io/v1", "podgroups"))


def test_where_v1_is_served_every_verb_speaks_v1(api, kdist, spec, podgroups_v1):
    """Submit (its dry run and create), status, the watch and delete (so --replace, which
    is delete then submit) ask for the PodGroup in v1, never in v1beta1; v1beta1's
    discovery is not asked."""
    from tests.api.test_verbs import _finish

    out = kdist("submit", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    assert_calls(out, [PROBE, GANG[0], ("POST", GROUPS_V1), ("POST", JOBS), ("POST", SVCS),
                       ("POST", GROUPS_V1)])
    group = api.store.get_stored("podgroups", "demo")
    assert group["apiVersion"] == "scheduling.k8s.io/v1"
    api.store.update(dict(group, status={"conditions": [
        {"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable",
         "message": "no room", "lastTransitionTime": "2025-01-02T03:04:00Z"}]}))
    out = kdist("status", "demo")
    assert out.code == 0 and "job demo waits as a gang (PodGroup demo): the scheduler " \
        "cannot place all 2 pods at once, so none starts: Unschedulable: no room" \
        in out.stdout, out.describe()
    out = kdist("delete", "demo")  # --replace's first half
    assert out.code == 0, out.describe()
    api.store.finish_deletions()  # the garbage collector's part: the PodGroup it owned
    api.on_watch["jobs"] = lambda: _finish(api, api.store.get_stored("jobs", "demo"), (0, 0))
    out = kdist("submit", "--timeout", "10", str(spec))
    assert out.code == 0 and "job demo succeeded" in out.stdout, out.describe()
    assert ("GET", GROUPS_V1) in out.calls, "the watch reads the PodGroup in v1"
    out = kdist("delete", "demo")
    assert out.code == 0, out.describe()
    assert api.store.alive("podgroups") == []
    assert not [r for r in api.requests if "scheduling.k8s.io/v1beta1" in r.path], \
        [r.path for r in api.requests if "v1beta1" in r.path]


def test_delete_takes_an_unowned_v1_podgroup(api, kdist, tmp_path, podgroups_v1):
    """`kubectl apply` of a rendered gang job whose PodGroup was made v1 by hand: no owner,
    found through the job's pods' schedulingGroup, deleted in the version served."""
    from kdist.rendering import render
    from kdist.spec import load_job

    path = objects.job_yaml(tmp_path / "native.yaml")
    path.write_text(path.read_text().replace("distributed: {backend: gloo}",
                                             "distributed: {backend: gloo, gang: native}"))
    for obj in render(load_job(path), podgroup_api="scheduling.k8s.io/v1"):
        api.add(dict(obj, metadata=dict(obj["metadata"], namespace="default")))
    out = kdist("delete", "demo")
    assert out.code == 0, out.describe()
    assert ("DELETE", f"{GROUPS_V1}/demo") in [(r.method, r.path) for r in out.requests], \
        out.describe()


def test_check_names_the_version_served(api, kdist, podgroups_v1):
    from tests.api.test_check import verdicts

    got = verdicts(kdist("check", "-o", "json"))["gang"]
    assert got["status"] == "ok", got
    assert got["detail"].startswith("scheduling.k8s.io/v1 PodGroups are served"), got


def test_submit_wait_reads_the_podgroup_without_watching_it(api, kdist, spec):
    """Issue 53: a job's watch holds two connections (its Job, its pods), gang or not; the
    PodGroup, which only says why the pods wait, is read by GETs."""
    def finish(job):
        api.add(objects.pod(job, 0, exit_code=0), objects.pod(job, 1, exit_code=0))
        api.store.update(dict(job, status={"conditions": [{"type": "Complete",
                                                           "status": "True"}]}))

    api.after_create["jobs"] = finish
    out = kdist("submit", "--timeout", "20", str(spec))
    assert out.code == 0, out.describe()
    watched = {r.path for r in out.requests if r.is_watch}
    assert watched == {JOBS, "/api/v1/namespaces/default/pods"}, out.describe()
    reads = [r for r in out.requests if r.path == GROUPS and r.method == "GET"]
    assert reads, f"the PodGroup was never read:\n{out.describe()}"
