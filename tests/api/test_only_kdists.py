"""kdist deletes only what it made (#37): `delete`, `submit --replace`, the rollback of a
failed submit and the undo of a failed batch, on the CLI and the Python API.

What makes an object kdist's is one rule for every kind (`labels.made_by_kdist`):
app.kubernetes.io/managed-by=kdist and kdist.dev/job-name=<the job>. Each delete
carries the uid kdist checked or was given, so an object put in the place of that one
is not deleted; and a server's create answer naming another object than the one sent
is not believed.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

import kdist
from kdist.shared.errors import UsageError
from tests.api import objects
from tests.api.checks import error_line
from tests.api.fakeapi import FakeApi
from tests.api.test_batch import two
from tests.api.test_verbs import CONFIGMAPS, JOBS, PTJS, SVCS, running_job

pytestmark = pytest.mark.timeout(60)


def users(obj: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """`obj` as a user made it with kubectl: without kdist's labels (or with `labels`)."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["labels"] = dict(labels or {"app": "mine"})
    obj["spec"].get("template", {}).get("metadata", {}).pop("labels", None)
    return obj


def code_configmap(name: str, job: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A code ConfigMap of job `job` as `kubectl apply` of kdist's manifests leaves it
    (no owner)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default",
                         "labels": objects.labels(job) if labels is None else labels},
            "binaryData": {}}


def writes(out: Any) -> list[str]:
    """The requests that change something (a dry run, such as submit's restart-rules probe,
    changes nothing)."""
    return [str(r) for r in out.requests if r.method in ("POST", "PUT", "PATCH", "DELETE")
            and not r.query.get("dryRun")]


def uid(api: FakeApi, plural: str, name: str) -> str | None:
    stored = api.store.get_stored(plural, name)
    return None if stored is None else stored["metadata"]["uid"]


# ---- a same-named object kdist did not make -------------------------------------------------

STRANGERS = {
    "a Job without labels": ("jobs", objects.job, None),
    "a PyTorchJob without labels": ("pytorchjobs", objects.pytorchjob, None),
    "the job-name label only": ("jobs", objects.job, {"kdist.dev/job-name": "mine"}),
    "managed-by kdist, another job's name": (
        "jobs", objects.job, {**objects.labels("other"), "app.kubernetes.io/instance": "mine"}),
}


def strangers_job(api: FakeApi, case: str, name: str) -> tuple[str, str]:
    """A user's training object `name`, with a kdist Service and ConfigMap of that job name
    beside it (which must survive too); returns (plural, its uid)."""
    plural, make, labels = STRANGERS[case]
    job = api.add(users(make(name), labels))[0]
    api.add(objects.service(name), code_configmap(f"{name}-code-0", name))
    return plural, job["metadata"]["uid"]


def survived(api: FakeApi, plural: str, name: str, job_uid: str) -> None:
    assert uid(api, plural, name) == job_uid, f"the user's {plural}/{name} was deleted"
    assert api.store.alive(plural) == [name], api.store.names(plural)
    assert api.store.alive("services") == [name], "the Service must not go either"
    assert api.store.alive("configmaps") == [f"{name}-code-0"], "nor the ConfigMaps"


@pytest.mark.parametrize("case", STRANGERS)
def test_delete_refuses_a_job_kdist_did_not_make(api, kdist, case):
    plural, job_uid = strangers_job(api, case, "mine")
    ref = "pytorchjob.kubeflow.org/mine" if plural == "pytorchjobs" else "job.batch/mine"
    out = kdist("delete", "mine")
    error_line(out, 2, ref, "in namespace default", "not made by kdist",
               "app.kubernetes.io/managed-by=kdist", "deleted nothing")
    assert writes(out) == [], out.describe()
    survived(api, plural, "mine", job_uid)


@pytest.mark.parametrize("case", STRANGERS)
def test_replace_refuses_a_job_kdist_did_not_make(api, kdist, case, tmp_path):
    plural, job_uid = strangers_job(api, case, "mine")
    spec = objects.job_yaml(tmp_path / "job.yaml", "mine")
    out = kdist("submit", "--replace", "--no-wait", str(spec))
    error_line(out, 2, "/mine", "not made by kdist", "deleted nothing")
    assert writes(out) == [], out.describe()
    survived(api, plural, "mine", job_uid)


def test_a_batch_with_replace_refuses_it_too(api, kdist, tmp_path):
    plural, job_uid = strangers_job(api, "a Job without labels", "beta")
    a, b = two(tmp_path)
    out = kdist("submit", "--replace", "--no-wait", str(a), str(b))
    error_line(out, 2, str(b), "job.batch/beta", "not made by kdist",
               "the batch is undone: deleted job alpha")
    survived(api, plural, "beta", job_uid)
    assert api.store.alive("jobs") == ["beta"], "alpha of this batch must be undone"


def test_the_python_api_refuses_alike(api, kubeconfig, tmp_path):
    plural, job_uid = strangers_job(api, "a Job without labels", "mine")
    client = kdist.Client(kubeconfig=kubeconfig)
    with pytest.raises(UsageError, match="job.batch/mine .*not made by kdist"):
        client.delete("mine")
    spec = objects.job_yaml(tmp_path / "job.yaml", "mine")
    with pytest.raises(UsageError, match="not made by kdist"):
        client.submit(spec, wait=False, replace=True)
    with pytest.raises(UsageError, match="not made by kdist"):
        kdist.delete("mine", kubeconfig=kubeconfig)
    assert not [r for r in api.requests if r.method in ("POST", "DELETE")], api.requests
    survived(api, plural, "mine", job_uid)


def test_a_users_configmaps_with_the_job_name_label_stay(api, kdist):
    """Only kdist's ConfigMaps go with `kdist delete`: the job-name label alone (a user's
    copy, or another tool's) does not make one kdist's."""
    running_job(api, "old")
    api.add(code_configmap("old-code-0", "old"),
            code_configmap("users-cm", "old", {"kdist.dev/job-name": "old"}))
    out = kdist("delete", "--no-wait", "old")
    assert out.code == 0, out.describe()
    assert f"DELETE {CONFIGMAPS}/old-code-0" in " ".join(writes(out)), out.describe()
    assert api.store.alive("configmaps") == ["users-cm"], out.describe()


def test_a_job_replaced_between_the_look_and_the_delete_stays(api, kdist):
    """`kdist delete` checks the job is kdist's, then deletes it with that uid as a
    precondition: a user's job put in its place meanwhile is not deleted."""
    running_job(api, "old")
    theirs: dict[str, Any] = {}

    def swap() -> None:
        api.store.delete("jobs", "default", "old", "Background", False)
        theirs.update(api.add(users(objects.job("old")))[0])

    api.on_delete["jobs"] = swap
    out = kdist("delete", "--no-wait", "old")
    error_line(out, 3, "jobs old in namespace default", "another of that name", "not deleted")
    assert uid(api, "jobs", "old") == theirs["metadata"]["uid"], out.describe()
    delete = next(r for r in out.requests if r.method == "DELETE")
    assert delete.body["preconditions"]["uid"] != theirs["metadata"]["uid"], out.describe()
    assert delete.body["propagationPolicy"] == "Foreground", out.describe()


# ---- the rollback of a failed submit ---------------------------------------------------------


def test_a_create_answer_naming_another_object_is_not_believed(api, kdist, spec):
    """The server says it created job "victim" (an existing job) when kdist sent "demo",
    then refuses the Service: the rollback must delete demo, never victim."""
    victim = api.add(objects.job("victim"))[0]

    def forge(created: dict[str, Any]) -> None:
        created["metadata"].update(name="victim", uid=victim["metadata"]["uid"])
        api.fail(403, message="exceeded quota", method="POST", path="/services")

    api.after_create["jobs"] = forge
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "answered the creation of job.batch/demo", "'victim'", "malformed")
    assert uid(api, "jobs", "victim") == victim["metadata"]["uid"], out.describe()
    assert api.store.alive("jobs") == ["victim"], "demo (sent, maybe made) must be undone"
    assert writes(out) == [f"POST {JOBS}?fieldManager=kdist", f"DELETE {JOBS}/demo"], \
        out.describe()


@pytest.mark.parametrize("field,value", [("namespace", "kube-system"), ("kind", "Pod")])
def test_an_answer_about_another_namespace_or_kind_is_not_believed(api, kdist, spec, field,
                                                                   value):
    def forge(created: dict[str, Any]) -> None:
        (created["metadata"] if field == "namespace" else created)[field] = value

    api.after_create["jobs"] = forge
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "answered the creation of job.batch/demo", value, "malformed")
    assert api.store.alive("jobs") == [] and api.store.alive("services") == [], out.describe()


def test_the_rollback_deletes_by_the_uid_it_was_given(api, kdist, spec):
    """Job demo is created; before the Service is refused, someone replaces demo with a job
    of their own. The rollback's delete carries demo's uid: theirs stays."""
    theirs: dict[str, Any] = {}

    def replace_then_refuse(created: dict[str, Any]) -> None:
        api.store.delete("jobs", "default", "demo", "Background", False)
        theirs.update(api.add(objects.job("demo"))[0])
        api.fail(403, message="exceeded quota", method="POST", path="/services")

    api.after_create["jobs"] = replace_then_refuse
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "exceeded quota", "undoing the submission failed too",
               "job.batch/demo", "not deleted")
    assert uid(api, "jobs", "demo") == theirs["metadata"]["uid"], out.describe()


def test_a_failed_batch_undoes_its_jobs_by_uid(api, kdist, tmp_path):
    """alpha is created, then replaced by someone's own alpha; beta is refused. The undo
    deletes the alpha this batch made, by its uid: the other one stays, and the line says
    so."""
    theirs: dict[str, Any] = {}

    def replace_then_refuse(created: dict[str, Any]) -> None:
        api.store.delete("jobs", "default", "alpha", "Background", False)
        theirs.update(api.add(objects.job("alpha"))[0])
        api.fail(403, message="exceeded quota", method="POST", path="/jobs")

    api.after_create["jobs"] = replace_then_refuse
    a, b = two(tmp_path)
    out = kdist("submit", "--no-wait", str(a), str(b))
    error_line(out, 3, str(b), "exceeded quota", "could not delete job alpha", "not deleted")
    assert uid(api, "jobs", "alpha") == theirs["metadata"]["uid"], out.describe()
    delete = next(r for r in out.requests if r.method == "DELETE")
    assert delete.path == f"{JOBS}/alpha" and delete.body["preconditions"]["uid"], \
        out.describe()


def test_a_good_rollback_still_deletes_what_it_made(api, kdist, spec):
    api.fail(403, message="exceeded quota", method="POST", path="/services")
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "exceeded quota")
    assert api.store.alive("jobs") == [], out.describe()
    delete = next(r for r in out.requests if r.method == "DELETE")
    assert delete.path == f"{JOBS}/demo", out.describe()
    post = next(r for r in out.requests if r.method == "POST" and not r.query.get("dryRun"))
    assert post.path == JOBS and delete.body["preconditions"]["uid"], out.describe()


def test_deleting_ones_own_pytorchjob_and_service_still_works(api, kdist):
    ptj = api.add(objects.pytorchjob("ptj"))[0]
    api.add(objects.service("ptj", ptj))
    out = kdist("delete", "--no-wait", "ptj")
    assert out.code == 0, out.describe()
    assert writes(out) == [f"DELETE {PTJS}/ptj", f"DELETE {SVCS}/ptj"], out.describe()
    assert [r.body["preconditions"]["uid"] for r in out.requests if r.method == "DELETE"] \
        == [ptj["metadata"]["uid"], uid(api, "services", "ptj")], out.describe()

