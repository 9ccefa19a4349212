"""A request ends by its deadline (issue 38), however slowly the server answers.

The request timeout was a socket timeout, so it bounded each read: a server that
sends one byte a second never tripped it, and `kdist list` with
`--request-timeout 2` ran for minutes. Now the deadline is the whole request's:
connecting, sending, the headers and the body. These run kdist as a child process
(a hang cannot be stopped in-process); time is counted from the slow request's
arrival.
"""

from __future__ import annotations

import pytest

from tests.api import kubeconfigs, objects
from tests.api.checks import error_line
from tests.api.runner import run_process
from tests.api.test_deadlines import KNOB, LIMIT_AFTER_REQUEST, SHORT, SLACK, STARTUP_LIMIT
from tests.api.wireapi import WireApi

FAKEAPI_CLASS = WireApi
pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("head", [False, True], ids=["whole-answer", "body-only"])
def test_a_server_answering_a_byte_a_second(api, kdist_proc, head):
    api.add(objects.job("demo"))
    api.dribble(every=1.0, head=head, method="GET", path="/jobs$")  # not /jobsets
    out = kdist_proc("list", env={KNOB: str(SHORT)}, limit=STARTUP_LIMIT,
                     limit_after_request=LIMIT_AFTER_REQUEST)
    assert not out.timed_out, f"kdist was still running; killed:\n{out.describe()}"
    error_line(out, 3, "did not answer list jobs in namespace default within 2s")
    slow = next(r for r in out.requests if r.path.endswith("/jobs"))
    assert out.ended_at - slow.at <= SHORT + SLACK, out.describe()


def test_a_server_answering_a_byte_a_second_over_tls(tmp_path):
    """The watchdog shuts the socket under TLS too."""
    pair = kubeconfigs.self_signed(tmp_path)
    if pair is None:
        pytest.skip("no openssl CLI to make a certificate")
    api = WireApi(tls=pair).start()
    try:
        api.dribble(every=1.0, head=True, method="GET", path="/jobs$")  # not /jobsets
        path = tmp_path / "kubeconfig"
        path.write_text(kubeconfigs.kubeconfig_text(api.url, ca=pair.cert))
        out = run_process(api, path, ["list"], env={KNOB: str(SHORT)}, limit=STARTUP_LIMIT,
                          limit_after_request=LIMIT_AFTER_REQUEST)
    finally:
        api.stop()
    assert not out.timed_out, f"kdist was still running; killed:\n{out.describe()}"
    error_line(out, 3, "did not answer list jobs in namespace default within 2s")
    slow = next(r for r in out.requests if r.path.endswith("/jobs"))
    assert out.ended_at - slow.at <= SHORT + SLACK, out.describe()


@pytest.mark.parametrize("head", [False, True], ids=["all", "body"])
def test_a_log_read_a_byte_a_second(api, kdist_proc, head):
    """The same for a log (read whole, not followed), after the job and pods are read.
    A log of any size streams for as long as it takes, but each piece of it must come
    within the deadline: a body that drips is no log that goes on."""
    job = api.add(objects.job("demo"))[0]
    api.add(objects.pod(job, 0), objects.pod(job, 1))
    api.dribble(every=1.0, head=head, method="GET", path="/log")
    out = kdist_proc("logs", "demo", "--rank", "0", env={KNOB: str(SHORT)},
                     limit=STARTUP_LIMIT, limit_after_request=LIMIT_AFTER_REQUEST + 5)
    assert not out.timed_out, f"kdist was still running; killed:\n{out.describe()}"
    error_line(out, 3, "logs of 1 of 1 ranks could not be read")
    said = [line for line in out.stderr.splitlines() if line.startswith("[rank 0] ")]
    assert len(said) == 1 and "did not answer get pods/log demo-0-abcde" in said[0] \
        and "within 2s" in said[0], out.describe()  # skipped, as a refused log is
    slow = next(r for r in out.requests if r.path.endswith("/log"))
    assert out.ended_at - slow.at <= SHORT + SLACK, out.describe()
