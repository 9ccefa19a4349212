"""Native gang scheduling (distributed.gang) over the wire: discovery decides auto, the
PodGroup is created after the Job and owned by it, `status` says what holds the pods,
and `delete` leaves nothing of it."""

from __future__ import annotations

import pytest

from tests.api import objects
from tests.api.checks import assert_calls, error_line
from tests.api.test_verbs import GANG, JOBS, SVCS

pytestmark = pytest.mark.timeout(60)
FAKEAPI_OPTIONS = {"podgroups": True}
GROUPS = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/podgroups"


def test_auto_makes_a_podgroup_owned_by_the_job_that_every_pod_names(api, kdist, spec):
    out = kdist("submit", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    assert_calls(out, [GANG, ("POST", JOBS), ("POST", SVCS), ("POST", GROUPS)])
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
    error_line(out, 2, "spec.distributed.gang native: the cluster does not serve "
                       "scheduling.k8s.io/v1beta1 PodGroups")
    assert api.store.alive("jobs") == []
