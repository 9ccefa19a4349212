"""A server that accepts and never answers: every verb ends, exit 3, within a deadline.

Today: 34 s (TLS handshake) and 184 s (3 x 60 s reads) before exit 3, and a watch
can wait up to --timeout (300 s). Issue 14 asks for an overall deadline of about
15 s for a dead server, configurable. Proposed knob (not in kdist yet, so these
fail until it exists): the environment variable KDIST_REQUEST_TIMEOUT (seconds),
with a global `--request-timeout` flag as its command-line twin.

These run kdist as a child process: a stuck thread cannot be stopped, a process can.
Time is measured from the child's first request to its exit, so interpreter
start-up on a busy machine does not count; a child still running
LIMIT_AFTER_REQUEST seconds after its first request is killed and fails the test.
"""

from __future__ import annotations

import re

import pytest

from tests.api.checks import error_line
from tests.api.fakeapi import blackhole
from tests.api.kubeconfigs import write_kubeconfig
from tests.api.test_verbs import running_job

KNOB = "KDIST_REQUEST_TIMEOUT"
SHORT = 2.0  # the knob's value in these tests
SLACK = 3.0  # what may pass beyond the deadline before kdist has exited
DEFAULT = 15.0  # the default deadline the issue asks for (about)
LIMIT_AFTER_REQUEST = SHORT + 12
STARTUP_LIMIT = 60.0  # a child that has not even sent its first request by then is stuck
TIMED_OUT = re.compile(r"time[sd]? ?out|timed out|did not answer|no answer|not respond"
                       r"|unresponsive", re.I)

pytestmark = pytest.mark.timeout(180)

VERBS = {
    "list": ["list"], "status": ["status", "demo"], "logs": ["logs", "demo"],
    "delete": ["delete", "demo"], "submit": ["submit", "--no-wait", "{spec}"],
    "submit --replace": ["submit", "--replace", "--no-wait", "{spec}"],
}


def _args(verb: str, spec) -> list[str]:
    return [a.format(spec=spec) for a in VERBS[verb]]


def _dead_server_line(out, where: str) -> None:
    assert not out.timed_out, f"kdist was still running; killed:\n{out.describe()}"
    line = error_line(out, 3, where)
    assert TIMED_OUT.search(line), f"the error does not say the server timed out:\n{line}"


@pytest.mark.parametrize("verb", VERBS)
def test_a_server_that_never_answers(api, kdist_proc, spec, verb):
    running_job(api, "demo")
    api.hang()
    out = kdist_proc(*_args(verb, spec), env={KNOB: str(SHORT)}, limit=STARTUP_LIMIT,
                     limit_after_request=LIMIT_AFTER_REQUEST)
    _dead_server_line(out, api.url.split("://")[1])
    assert out.after_first_request is not None and \
        out.after_first_request <= SHORT + SLACK, out.describe()


def test_delete_whose_watch_never_answers(api, kdist_proc):
    """The deletes go through, then the server stops answering while kdist waits for the
    pods to go: bounded as well (today by --timeout, 300 s), counted from the first
    unanswered request (a retry may be under way when the deadline passes)."""
    running_job(api, "demo")
    api.hang(method="GET", path="/pods")
    out = kdist_proc("delete", "demo", env={KNOB: str(SHORT)}, limit=STARTUP_LIMIT,
                     limit_after_request=LIMIT_AFTER_REQUEST)
    _dead_server_line(out, api.url.split("://")[1])
    hung = next(r for r in out.requests if r.path.endswith("/pods"))
    assert out.ended_at - hung.at <= 2 * SHORT + SLACK, out.describe()


@pytest.mark.timeout(240)
def test_the_default_deadline_is_about_15_seconds(api, kdist_proc):
    api.hang()
    out = kdist_proc("list", limit=STARTUP_LIMIT, limit_after_request=2 * DEFAULT + 5)
    _dead_server_line(out, api.url.split("://")[1])
    assert out.after_first_request <= DEFAULT + SLACK + 2, out.describe()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_listener_that_never_accepts(kdist_proc, tmp_path, baseline, scheme):
    """Connects succeed (the kernel's backlog) but nothing reads: over https the TLS
    handshake never completes (34 s today)."""
    sock, port = blackhole()
    try:
        kubeconfig = write_kubeconfig(tmp_path / "blackhole", f"{scheme}://127.0.0.1:{port}")
        startup = baseline.seconds - baseline.after_first_request
        limit = startup + LIMIT_AFTER_REQUEST + 5
        out = kdist_proc("list", kubeconfig=kubeconfig, env={KNOB: str(SHORT)}, limit=limit)
    finally:
        sock.close()
    _dead_server_line(out, f"127.0.0.1:{port}")
    assert out.seconds <= startup + SHORT + SLACK + 2, \
        f"start-up {startup:.1f}s here; {out.describe()}"
