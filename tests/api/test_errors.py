"""What the API answers when it refuses or fails, as the user sees it: exit code, one line.

The expected lines are the ones `api_error` (kdist's one place for API errors)
documents; docs/user-guide.md: exit 2 bad input (a job that is not there), 3 cluster or API error.
"""

from __future__ import annotations

import pytest

from tests.api import objects
from tests.api.checks import assert_calls, error_line
from tests.api.kubeconfigs import write_kubeconfig
from tests.api.test_verbs import GANG, JOBS, PODS, PROBE, SVCS, delete_calls, running_job

# In-process runs: a hang fails the one test, not the session.
pytestmark = pytest.mark.timeout(60)

VERBS = {
    "list": ["list"], "list -A": ["list", "-A"], "status": ["status", "demo"],
    "logs": ["logs", "demo"], "delete": ["delete", "demo"],
    "submit": ["submit", "--no-wait", "{spec}"],
    "submit --dry-run=server": ["submit", "--dry-run=server", "{spec}"],
    "submit --replace": ["submit", "--replace", "--no-wait", "{spec}"],
}


def verb_args(verb: str, spec) -> list[str]:
    return [a.format(spec=spec) for a in VERBS[verb]]


# ---- not a Kubernetes API -----------------------------------------------------------------


MAX_LINE = 300  # an error line that quotes a page may quote this much of it, no more


@pytest.mark.parametrize("verb", VERBS)
def test_an_html_answer_is_a_clear_cluster_error(api, kdist, spec, verb):
    """A login portal or proxy answering 200 with a web page: today a JSONDecodeError
    traceback. Want exit 3, one short line that names the server."""
    running_job(api, "demo")
    api.html()
    out = kdist(*verb_args(verb, spec))
    line = error_line(out, 3, api.url.split("://")[1])
    assert len(line) <= MAX_LINE, out.describe()


@pytest.mark.parametrize("verb", ["list", "status", "delete", "submit"])
def test_a_proxy_error_page_is_one_line(api, kdist, spec, verb):
    """A 502 whose body is an HTML page, not a Status: the page must not become the message."""
    running_job(api, "demo")
    api.html(code=502)
    out = kdist(*verb_args(verb, spec))
    line = error_line(out, 3, "502")
    assert len(line) <= MAX_LINE, out.describe()


# ---- Status answers -----------------------------------------------------------------------


def test_403_on_list(api, kdist):
    api.fail(403, message='jobs.batch is forbidden: User "dev" cannot list resource "jobs"',
             path="/jobs$")  # not /jobsets
    out = kdist("list")
    error_line(out, 3, "forbidden: list jobs in namespace default", 'User "dev" cannot list')


def test_403_on_delete(api, kdist):
    running_job(api, "old")
    api.fail(403, message="nope", method="DELETE")
    out = kdist("delete", "old")
    error_line(out, 3, "forbidden: delete jobs in namespace default")
    assert api.store.names("jobs") == ["old"]


def test_401_names_the_credentials(api, kdist, tmp_path):
    kubeconfig = write_kubeconfig(tmp_path / "kc-bad-token", api.url, token="wrong")
    out = kdist("list", kubeconfig=kubeconfig)
    error_line(out, 3, "unauthorized", api.url)


@pytest.mark.parametrize("verb", ["status", "logs", "delete"])
def test_404_a_job_that_is_not_there(api, kdist, verb):
    out = kdist(verb, "ghost")
    error_line(out, 2, "no job ghost in namespace default")


def test_404_namespace_on_submit(api, kdist, spec):
    out = kdist("-n", "nowhere", "submit", "--no-wait", str(spec))
    error_line(out, 3, "namespace nowhere not found")
    assert_calls(out, [("POST", "/api/v1/namespaces/nowhere/pods"), *GANG,
                       ("POST", "/apis/batch/v1/namespaces/nowhere/jobs")])


def test_409_the_job_exists(api, kdist, spec):
    api.add(objects.job("demo"))
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "job demo already exists in namespace default", "--replace")
    assert_calls(out, [PROBE, *GANG, ("POST", JOBS)])


def test_409_on_the_service_rolls_the_job_back(api, kdist, spec):
    api.add(objects.service("demo"))
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "service/demo in namespace default already exists", "of job demo",
               "use --replace or `kdist delete demo`")
    assert_calls(out, [PROBE, *GANG, ("POST", JOBS), ("POST", SVCS), ("GET", f"{SVCS}/demo"),
                       ("DELETE", f"{JOBS}/demo")])
    assert api.store.alive("jobs") == [], "the half-made submission must be undone"


def test_422_lists_the_causes(api, kdist, spec):
    field = "spec.template.spec.containers[0].ports[0].containerPort"
    api.fail(422, "Invalid", 'Job.batch "demo" is invalid', method="POST", path="/jobs",
             details={"name": "demo", "group": "batch", "kind": "Job", "causes": [
                 {"reason": "FieldValueInvalid", "field": field,
                  "message": "Invalid value: 70000: must be between 1 and 65535"}]})
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "the API server refused jobs demo", f"{field}: Invalid value: 70000")


def test_500_on_list(api, kdist):
    api.fail(500, message="etcdserver: request timed out", path="/jobs$")  # not /jobsets
    out = kdist("list")
    error_line(out, 3, "list jobs in namespace default: 500 InternalError: etcdserver")


def test_503_on_status(api, kdist):
    api.fail(503, message="the server is shutting down", path="/jobs/")
    out = kdist("status", "demo")
    error_line(out, 3, "503", "shutting down")


# ---- watch answers ------------------------------------------------------------------------


def test_delete_relists_after_an_expired_watch(api, kdist):
    running_job(api, "old")
    expired = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "code": 410,
                                           "reason": "Expired", "message": "too old"}}
    api.script_watch("jobs", [expired])
    out = kdist("delete", "old")
    assert out.code == 0, out.describe()
    assert_calls(out, delete_calls("old"))
    job_watches = [r for r in out.requests if r.path == JOBS and r.is_watch]
    assert len(job_watches) == 2, out.describe()


def test_a_forbidden_watch_ends_delete_with_exit_3(api, kdist):
    running_job(api, "old")
    forbidden = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "code": 403,
                                             "reason": "Forbidden", "message": "no watch for you"}}
    api.script_watch("pods", [forbidden])
    out = kdist("delete", "old")
    error_line(out, 3, "no watch for you")
    assert any(r.path == PODS and r.is_watch for r in out.requests), out.describe()
