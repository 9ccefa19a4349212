"""The tier's own controls: the write guard flags what it must and only that, the
misbehaviours really misbehave, and the official client talks to the fake over https too."""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request

import pytest

from tests.api import objects
from tests.api.fakeapi import FakeApi, blackhole
from tests.api.kubeconfigs import self_signed, write_kubeconfig
from tests.api.routes import write_problem
from tests.api.runner import run_inprocess

# In-process runs: a hang fails the one test, not the session.
pytestmark = pytest.mark.timeout(60)

JOB = {"kind": "Job", "metadata": {"name": "demo", "namespace": "default"}}
NS = "/apis/batch/v1/namespaces/default"


@pytest.mark.parametrize("method,path,body", [
    ("DELETE", f"{NS}/jobs", None),
    ("DELETE", f"{NS}/jobs/", None),
    ("DELETE", f"{NS}/", None),  # what `delete ..` becomes once dot segments are resolved
    ("DELETE", "/api/v1/namespaces/default", None),  # the namespace itself
    ("DELETE", "/apis/kubeflow.org/v1/pytorchjobs", None),
    ("DELETE", f"{NS}/jobs/a%2Fb", None),
    ("DELETE", f"{NS}/jobs/%2E", None),
    ("DELETE", f"{NS}/jobs/%252e", None),
    ("DELETE", "/apis/batch/v1/namespaces/Bad_NS/jobs/demo", None),
    ("PATCH", f"{NS}/jobs", None),
    ("PUT", "/api/v1/namespaces/default/services/", None),
    ("POST", f"{NS}/jobs/demo", JOB),
    ("POST", f"{NS}/jobs/", JOB),
    ("POST", f"{NS}/jobs", {"kind": "Job", "metadata": {"name": ""}}),
    ("POST", f"{NS}/jobs", {"kind": "Job", "metadata": {"name": "x", "namespace": "other"}}),
    ("POST", f"{NS}/jobs", {"kind": "Service", "metadata": {"name": "x"}}),
    ("POST", "/apis/batch/v1/jobs", JOB),
])
def test_the_guard_flags(method, path, body):
    assert write_problem(method, path, body) is not None


@pytest.mark.parametrize("method,path,body", [
    ("DELETE", f"{NS}/jobs/demo", None),
    ("DELETE", f"{NS}/jobs/jobs", None),  # a job may be called "jobs"
    ("DELETE", "/api/v1/namespaces/default/services/demo", None),
    ("POST", f"{NS}/jobs", JOB),
    ("GET", f"{NS}/jobs/", None),  # reads are not its business
])
def test_the_guard_passes(method, path, body):
    assert write_problem(method, path, body) is None


def _call(api: FakeApi, method: str, path: str, timeout: float = 5) -> tuple[int, dict]:
    req = urllib.request.Request(f"{api.url}{path}", method=method,
                                 headers={"Authorization": "Bearer fake-token"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_collection_delete_deletes_everything_like_the_real_api(api):
    """Why the guard exists: the fake does what kube-apiserver does with such a URL."""
    api.add(objects.job("a"), objects.job("b"))
    code, body = _call(api, "DELETE", f"{NS}/jobs/")
    assert code == 200 and [i["metadata"]["name"] for i in body["items"]] == ["a", "b"]
    assert api.store.names("jobs") == []
    assert len(api.violations) == 1
    api.reported = 1  # seen: this test made it on purpose


def test_a_hung_request_reaches_the_server_and_gets_no_answer(api):
    api.hang()
    with pytest.raises(OSError):
        _call(api, "GET", "/api/v1/namespaces/default/pods", timeout=1)
    assert [r.path for r in api.requests] == ["/api/v1/namespaces/default/pods"]


def test_the_blackhole_never_completes_a_tls_handshake():
    sock, port = blackhole()
    try:
        client = socket.create_connection(("127.0.0.1", port), timeout=1)
        with pytest.raises(OSError):  # socket.timeout / ssl errors are OSErrors
            ssl.create_default_context().wrap_socket(client, server_hostname="127.0.0.1")
        client.close()
    finally:
        sock.close()


def test_a_status_rule_answers_a_status(api):
    api.fail(422, "Invalid", "bad", details={"causes": [{"field": "x", "message": "y"}]},
             times=1)
    code, body = _call(api, "GET", f"{NS}/jobs/demo")
    assert code == 422 and body["reason"] == "Invalid"
    code, body = _call(api, "GET", f"{NS}/jobs/demo")
    assert code == 404 and body["details"]["name"] == "demo", "times=1 applies once"


def test_kdist_over_https(tmp_path):
    """The official client against the fake with TLS and the CA in the kubeconfig."""
    pair = self_signed(tmp_path)
    if pair is None:
        pytest.skip("no openssl CLI to make a certificate")
    api = FakeApi(tls=pair).start()
    try:
        api.add(objects.job("alpha"))
        kubeconfig = write_kubeconfig(tmp_path / "kc", api.url, ca=pair.cert)
        out = run_inprocess(api, kubeconfig, ["list"])
        assert out.code == 0 and "alpha" in out.stdout, out.describe()
        assert out.requests[0].headers.get("authorization") == "Bearer fake-token"
    finally:
        api.stop()


def test_kept_alive_requests_are_not_held_by_nagle(api):
    """Every request on a kept-alive connection is answered at once, as kube-apiserver
    answers (Go sets TCP_NODELAY). With Nagle on, each answer's body waited for the ACK
    of its headers, which Linux delays 40 ms or more: every request after a connection's
    first took >= 40 ms, and the fake API, not kdist, was most of `status`'s wall time
    at 1,000 pods (32 logs and 5 pages). The median is below the delayed ACK's 40 ms
    floor by a wide margin, so load makes no difference."""
    import http.client
    import statistics
    import time

    api.add(objects.job("alpha"))
    host, port = api.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    took = []
    try:
        for _ in range(21):
            started = time.monotonic()
            conn.request("GET", f"{NS}/jobs/alpha")
            assert conn.getresponse().read()
            took.append(time.monotonic() - started)
    finally:
        conn.close()
    assert statistics.median(took) < 0.02, [round(t * 1000, 1) for t in took]
