"""All or nothing when a create's answer does not say what happened (issue 38).

The server stores the Job, then answers 504 (kube-apiserver's own timeout does),
or the answer never comes: kdist exited 3 and left the Job without its Service,
saying nothing. Now it reads the object back by name: the one there is this
submission's only if it carries this submission's token, and then it is deleted
with the rest (by its uid); when even that read fails, the error line names what
may be left. An object of that name that is not this submission's is never
deleted.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.api import objects
from tests.api.checks import error_line
from tests.api.store import ApiStatus, status_body
from tests.api.test_verbs import JOBS

pytestmark = pytest.mark.timeout(60)
SUBMISSION = "kdist.dev/submission"


class Dropped(Exception):
    """Raised in the fake server's handler: the connection closes without an answer."""


def deletes(out) -> list[str]:
    return [r.path for r in out.requests if r.method == "DELETE"]


def timeout_after_storing(created: dict[str, Any]) -> None:
    raise ApiStatus(status_body(504, "Timeout", "Timeout: request did not complete within "
                                "requested timeout - context deadline exceeded"))


@pytest.mark.parametrize("how", ["504", "no-answer", "deadline"])
def test_a_job_stored_before_its_create_failed_is_deleted_again(api, kdist, spec, how):
    stored: dict[str, Any] = {}

    def store_then_fail(created: dict[str, Any]) -> None:
        stored.update(created)
        if how == "504":
            timeout_after_storing(created)
        if how == "deadline":
            api.closing.wait()  # no answer, the connection open: kdist's deadline ends it
        raise Dropped("the answer never comes")

    api.after_create["jobs"] = store_then_fail
    out = kdist("submit", "--no-wait", str(spec), env={"KDIST_REQUEST_TIMEOUT": "1"})
    line = error_line(out, 3, "create jobs demo in namespace default",
                      "job.batch/demo all the same", "deleted again")
    assert ("504" in line, "within 1s" in line) == (how == "504", how == "deadline"), line
    assert api.store.alive("jobs") == [] and api.store.alive("services") == [], out.describe()
    delete = next(r for r in out.requests if r.method == "DELETE")
    assert delete.path == f"{JOBS}/demo", out.describe()
    assert delete.body["preconditions"]["uid"] == stored["metadata"]["uid"], out.describe()


def test_what_cannot_be_read_back_is_named(api, kdist, spec):
    """The Job is stored, the answer is a 504, and reading it back fails too: nothing is
    deleted blind, and the line says the job may exist and where to look."""
    def timeout_and_refuse_reads(created: dict[str, Any]) -> None:
        api.fail(503, method="GET", path="/jobs/demo")
        timeout_after_storing(created)

    api.after_create["jobs"] = timeout_and_refuse_reads
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "504", "job.batch/demo may exist", "kdist status demo")
    assert deletes(out) == [], out.describe()


def test_a_create_refused_before_storing_reads_back_and_deletes_nothing(api, kdist, spec):
    api.fail(504, method="POST", path="/jobs")
    out = kdist("submit", "--no-wait", str(spec))
    line = error_line(out, 3, "create jobs demo in namespace default: 504")
    assert "all the same" not in line and "may exist" not in line, line
    assert ("GET", f"{JOBS}/demo") in out.calls and deletes(out) == [], out.describe()


def test_a_job_of_that_name_that_is_not_this_submissions_is_left_alone(api, kdist, spec):
    """After the 504, someone's own kdist job "demo" is there (ours was never stored, or
    went): same labels, not this submission's token. Not deleted."""
    theirs: dict[str, Any] = {}

    def replaced(created: dict[str, Any]) -> None:
        assert created["metadata"]["annotations"][SUBMISSION]  # what the create sent
        api.store.delete("jobs", "default", "demo", "Background", False)
        theirs.update(api.add(objects.job("demo"))[0])
        timeout_after_storing(created)

    api.after_create["jobs"] = replaced
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "504")
    assert deletes(out) == [] and api.store.alive("jobs") == ["demo"], out.describe()
    assert api.store.get("jobs", "default", "demo")["metadata"]["uid"] == \
        theirs["metadata"]["uid"], out.describe()


def test_every_object_of_a_submission_carries_one_token(api, kdist, spec):
    out = kdist("submit", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    tokens = {r.body["metadata"]["annotations"][SUBMISSION]
              for r in out.requests if r.method == "POST" and not r.query.get("dryRun")}
    assert len(tokens) == 1 and len(next(iter(tokens))) >= 16, out.describe()
