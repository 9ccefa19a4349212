"""`kdist check` reads its probes' answers as misshapen as a server may send them.

A review whose status is text, a LocalQueue list of the wrong shape, a dry run's
answer without the fields asked about, discovery whose `resources` is not a list,
a cluster without SelfSubjectReview (Kubernetes < 1.28) or one where it answers
403 or 500: each is one line saying what could not be checked, and the checks go
on. Discovery's shape matters to the other verbs too: one error line, no traceback.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.api import objects
from tests.api.checks import error_line
from tests.api.fakeapi import FakeApi
from tests.api.store import status_body
from tests.api.test_check import serve, verdicts

pytestmark = pytest.mark.timeout(60)
SELF = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
ACCESS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
KUBEFLOW = "/apis/kubeflow.org/v1"


def checked(kdist) -> dict[str, dict[str, str]]:
    """Every verdict, the run having reached the last check without a traceback."""
    out = kdist("check", "-o", "json")
    assert "Traceback" not in out.stderr, out.describe()
    got = verdicts(out)
    assert "restart rules" in got and "cluster" not in got, out.describe()
    return got


@pytest.mark.parametrize("code", [404, 403, 500])
def test_credentials_without_a_self_subject_review_are_one_line(api, kdist, code):
    """Before 1.28 the API has no SelfSubjectReview (404, a Status whose `status` is the
    text "Failure"); a server may also forbid or fail it."""
    api.fail(code, method="POST", path=SELF)
    got = checked(kdist)
    said = got["credentials"]
    assert said["status"] in ("ok", "unknown"), said
    assert f"SelfSubjectReview answered {code}" in said["detail"], said
    assert got["namespace"]["status"] == "ok", got["namespace"]


@pytest.mark.parametrize("answer", [
    {"kind": "SelfSubjectReview", "status": "accepted"},
    {"kind": "SelfSubjectReview", "status": {"userInfo": "fake-user"}},
    {"kind": "SelfSubjectReview", "status": {"userInfo": {"username": 7}}}])
def test_a_self_subject_review_of_another_shape(api, kdist, answer):
    api.answer(answer, code=201, method="POST", path=SELF)
    said = checked(kdist)["credentials"]
    assert said["status"] == "ok" and "does not say as whom" in said["detail"], said


@pytest.mark.parametrize("status", ["allowed", ["allowed"], {"allowed": "true"}])
def test_an_access_review_whose_status_is_not_an_object_is_unknown(api, kdist, status):
    api.answer({"kind": "SelfSubjectAccessReview", "status": status}, code=201,
               method="POST", path=ACCESS)
    got = checked(kdist)
    said = got["access jobs.batch"]
    assert said["status"] == "unknown" and "malformed review answer" in said["detail"], said


@pytest.mark.parametrize("listing", [
    {"items": 5}, {"items": {"team-q": {}}}, {"items": "team-q"},
    {"items": [{"metadata": "team-q"}]}, {"items": [{"metadata": {"name": 5}}]}])
def test_a_localqueue_list_of_the_wrong_shape_is_unknown(api, kdist, listing):
    serve(api, kueue=True)
    api.answer(dict(listing, kind="LocalQueueList"), method="GET",
               path="/namespaces/default/localqueues$")
    said = checked(kdist)["kueue"]
    assert said["status"] == "unknown" and "malformed" in said["detail"], said


@pytest.mark.parametrize("answer", [
    {"kind": "Pod", "spec": "probe"}, {"kind": "Pod", "spec": {"containers": 5}},
    {"kind": "Pod", "spec": {"containers": {"probe": {}}}},
    {"kind": "Pod", "spec": {"containers": [{"restartPolicyRules": 5}]}}])
def test_a_dry_run_answer_of_the_wrong_shape_is_unknown(api, kdist, answer):
    api.answer(answer, code=201, method="POST", path="/namespaces/default/pods$")
    said = checked(kdist)["restart rules"]
    assert said["status"] == "unknown" and "malformed" in said["detail"], said


@pytest.mark.parametrize("answer", [{"kind": "Job", "spec": {"template": "x"}},
                                    {"kind": "Job", "spec": {"template": {"spec": []}}}])
def test_a_dry_run_job_answer_of_the_wrong_shape_is_unknown(api, kdist, answer):
    api.fail(403, method="POST", path="/namespaces/default/pods$")
    api.answer(answer, code=201, method="POST", path="/namespaces/default/jobs$")
    said = checked(kdist)["restart rules"]
    assert said["status"] == "unknown" and "malformed" in said["detail"], said


def test_a_refused_dry_run_whose_status_has_text_details(api, kdist):
    """A namespace probe's 404 whose `details` is text, not the Status object's."""
    api.fail(403, method="GET", path="/api/v1/namespaces/default$")
    api.answer({"kind": "Status", "status": "Failure", "code": 404, "details": "namespaces"},
               code=404, method="POST", path="/namespaces/default/configmaps$")
    said = checked(kdist)["namespace"]
    assert said["status"] == "unknown", said


def discovery_of(resources: Any) -> dict[str, Any]:
    return {"kind": "APIResourceList", "groupVersion": "kubeflow.org/v1", "resources": resources}


@pytest.mark.parametrize("resources", [5, "pytorchjobs", {"name": "pytorchjobs"}])
def test_discovery_whose_resources_is_not_a_list_is_unknown_in_check(api, kdist, resources):
    api.answer(discovery_of(resources), method="GET", path=f"{KUBEFLOW}$")
    got = checked(kdist)
    said = got["pytorchjob"]
    assert said["status"] == "unknown" and "resources is" in said["detail"], said
    assert got["access jobs.batch"]["status"] == "ok"


@pytest.mark.parametrize("verb", ["status", "delete", "submit --replace"])
def test_discovery_whose_resources_is_not_a_list_is_one_error_line(api, kdist, spec, verb):
    api.add(objects.job("demo"))
    api.answer(discovery_of(5), method="GET", path=f"{KUBEFLOW}$")
    *words, last = verb.split()
    # status asks discovery only past the built-in kinds: of a job that is no Indexed Job
    out = kdist(*verb.split(), "--no-wait", str(spec)) if words else \
        kdist(verb, "demo" if verb != "status" else "other")
    error_line(out, 3, "discovery of kubeflow.org/v1", "resources is 5, not a list")


def test_status_of_a_review_answer_that_is_no_status(api: FakeApi, kdist):
    """A 500 whose body is a Status with text where `status` is: one line per verb."""
    api.answer(status_body(500, "InternalError", "etcd is down"), code=500,
               method="POST", path=ACCESS)
    got = checked(kdist)
    said = got["access jobs.batch"]
    assert said["status"] == "fail" and "the review answered 500" in said["detail"], said
