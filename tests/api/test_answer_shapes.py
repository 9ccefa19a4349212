"""A wrongly shaped answer from the API server is exit 3 and one line naming the object, never
a traceback (issue 38).

Before: a watch event whose object is a string or null, conditions that are strings, an
exitCode "137", a numeric creationTimestamp, a list item without a name, or a create answer
without a uid each ended `status`, `list`, `submit` (watching) or `wait` in a Python
traceback (or, in a watch thread, a crash handed on as one).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.api import objects
from tests.api.checks import error_line
from tests.api.fakeapi import FakeApi
from tests.api.test_verbs import running_job

JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"
VERBS = {"status": ["status", "demo"], "list": ["list"],
         "submit": ["submit", "--timeout", "20", "{spec}"],
         "wait": ["wait", "demo", "--timeout", "20"]}

pytestmark = pytest.mark.timeout(120)

Mutate = Callable[[dict[str, Any]], None]


def _job_field(mutate: Mutate) -> Callable[[FakeApi, str], None]:
    """The job object says something wrong: in place before, or right after kdist creates it
    (so the watch is the first to read it)."""

    def setup(api: FakeApi, verb: str) -> None:
        if verb == "submit":
            def after(created: dict[str, Any]) -> None:
                bad = copy.deepcopy(created)
                mutate(bad)
                api.store.update(bad)
            api.after_create["jobs"] = after
            return
        job = running_job(api, "demo")
        mutate(job)
        api.store.update(job)
    return setup


def _pod_field(mutate: Mutate) -> Callable[[FakeApi, str], None]:
    """Rank 0's pod says something wrong: there before, or made as kdist creates the job."""

    def setup(api: FakeApi, verb: str) -> None:
        def add(job: dict[str, Any]) -> None:
            pod = objects.pod(job, 0, exit_code=137)
            mutate(pod)
            api.add(pod)
        if verb == "submit":
            api.after_create["jobs"] = add
        else:
            add(running_job(api, "demo"))
    return setup


def _event_object(obj: Any) -> Callable[[FakeApi, str], None]:
    def setup(api: FakeApi, verb: str) -> None:
        if verb != "submit":
            running_job(api, "demo")
        api.script_watch("jobs", [{"type": "MODIFIED", "object": obj}])
    return setup


def _list_item(item: Any) -> Callable[[FakeApi, str], None]:
    """A list answer holding `item`: of jobs for `list` and `wait`, of pods otherwise."""

    def setup(api: FakeApi, verb: str) -> None:
        if verb != "submit":
            running_job(api, "demo")
        on_jobs = verb in ("list", "wait")
        body = {"kind": "JobList" if on_jobs else "PodList", "apiVersion": "v1",
                "metadata": {"resourceVersion": "5"}, "items": [item]}
        # Only the collection's list, never one object's GET nor a watch.
        api.answer(body, method="GET", path=f"{JOBS if on_jobs else PODS}$", watch=False)
    return setup


def _status(**fields: Any) -> Mutate:
    return lambda obj: obj.setdefault("status", {}).update(fields)


def _terminated(**fields: Any) -> Mutate:
    return lambda pod: pod["status"]["containerStatuses"][0]["state"]["terminated"].update(
        fields)


def _meta(**fields: Any) -> Mutate:
    return lambda obj: obj["metadata"].update(fields)


# shape -> (setup, the verbs it reaches, words the error line must hold)
SHAPES: dict[str, tuple[Callable[[FakeApi, str], None], tuple[str, ...], tuple[str, ...]]] = {
    "event object is a string": (_event_object("demo"), ("submit", "wait"),
                                 ("a watch event on job", '"demo" instead of an object')),
    "event object is null": (_event_object(None), ("submit", "wait"),
                             ("a watch event on job", "null instead of an object")),
    "job conditions are strings": (_job_field(_status(conditions=["Complete"])),
                                   ("status", "list", "submit", "wait"),
                                   ("job demo", "status.conditions[0]", "not an object")),
    "pod conditions are a string": (_pod_field(_status(conditions="Ready")),
                                    ("status", "submit", "wait"),
                                    ("pod demo-0-abcde", "status.conditions", "not a list")),
    "exitCode is a string": (_pod_field(_terminated(exitCode="137")),
                             ("status", "submit", "wait"),
                             ("pod demo-0-abcde", "exitCode", '"137"', "not an integer")),
    "creationTimestamp is a number": (_job_field(_meta(creationTimestamp=1735786800)),
                                      ("status", "list", "submit", "wait"),
                                      ("job demo", "creationTimestamp", "1735786800")),
    "a list item without a name": (_list_item({"metadata": {"namespace": "default"}}),
                                   ("status", "list", "submit", "wait"),
                                   ("the list of", "without metadata.name")),
    "a list item that is a string": (_list_item("demo"), ("status", "list", "submit", "wait"),
                                     ("the list of", '"demo"', "instead of an object")),
}
CASES = [(shape, verb) for shape, (_, verbs, _) in SHAPES.items() for verb in verbs]


@pytest.mark.parametrize(("shape", "verb"), CASES, ids=[f"{s}-{v}" for s, v in CASES])
def test_a_malformed_answer_is_one_line(api, kdist, spec, shape, verb):
    setup, _, words = SHAPES[shape]
    setup(api, verb)
    out = kdist(*[a.format(spec=spec) for a in VERBS[verb]])
    line = error_line(out, 3, "malformed answer from the API server", *words)
    assert len(line) < 400, line


def test_a_create_answer_without_a_uid_is_undone(api, kdist, spec):
    """The Job exists, but kdist cannot own its Service by it: deleted again, one line."""
    api.after_create["jobs"] = lambda created: created["metadata"].pop("uid")
    out = kdist("submit", "--timeout", "20", str(spec))
    error_line(out, 3, "creating job demo", "no metadata.uid")
    assert api.store.alive("jobs") == [] and api.store.alive("services") == [], out.describe()


def test_a_create_answer_that_is_no_job_is_undone(api, kdist, spec):
    api.after_create["services"] = lambda created: created.update(metadata="demo")
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "creating service demo", "metadata is")
    assert api.store.alive("jobs") == [] and api.store.alive("services") == [], out.describe()


def test_a_job_answer_without_a_namespace(api, kdist):
    running_job(api, "demo")
    job = api.store.get_stored("jobs", "demo")
    del job["metadata"]["namespace"]
    api.answer(job, method="GET", path=f"{JOBS}/demo$")
    out = kdist("status", "demo")
    error_line(out, 3, "Job demo", "without metadata.namespace")


def test_a_misshapen_server_dry_run_answer(api, kdist, spec):
    api.answer({"kind": "Job", "apiVersion": "batch/v1", "metadata": []}, code=201,
               method="POST", path=f"{JOBS}$")
    out = kdist("submit", "--dry-run=server", str(spec))
    error_line(out, 3, "creating job demo", "metadata is []")
    assert not any(r.method == "DELETE" for r in out.requests), "nothing was persisted"
