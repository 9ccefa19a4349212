"""Throttling and warnings from the API server (issue 38).

One 429 with `Retry-After: 1` ended the command (exit 3); now it is sent again as
client-go does, a bounded number of times, and a create too (a 429 is answered
before anything is stored). A server that asks for an hour still ends the
command at once, and a 5xx to a create is not sent again (it may have been
stored). A `Warning:` is printed once per distinct text, not once per request.
"""

from __future__ import annotations

import pytest

from tests.api import objects
from tests.api.checks import error_line
from tests.api.test_verbs import JOBS, SVCS
from tests.api.wireapi import WireApi

FAKEAPI_CLASS = WireApi
pytestmark = pytest.mark.timeout(60)


def sent(out, method: str, path: str) -> int:
    return sum(r.method == method and r.path == path for r in out.requests)


def test_one_429_on_a_list_is_waited_out(api, kdist):
    api.add(objects.job("alpha"))
    api.throttle("1", method="GET", path="/jobs$", times=1)  # not /jobsets
    out = kdist("list")
    assert out.code == 0, out.describe()
    assert "alpha" in out.stdout and sent(out, "GET", JOBS) == 2, out.describe()
    first, again = (r for r in out.requests if r.path == JOBS)
    assert again.at - first.at >= 0.9, "Retry-After: 1 is a second's wait"


def test_one_429_on_a_create_is_sent_again_and_stored_once(api, kdist, spec):
    api.throttle("1", method="POST", path="/jobs", times=1)
    out = kdist("submit", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    assert sent(out, "POST", JOBS) == 2 and sent(out, "POST", SVCS) == 1, out.describe()
    assert api.store.alive("jobs") == ["demo"] and api.store.alive("services") == ["demo"]


def test_a_storm_that_asks_for_an_hour_ends_at_once(api, kdist):
    api.throttle("3600")
    out = kdist("list")
    error_line(out, 3, "429", "retry after 3600s")
    assert out.seconds < 5 and sent(out, "GET", JOBS) <= 1, out.describe()


def test_a_server_that_keeps_throttling_is_given_up_on(api, kdist):
    api.throttle("0", method="GET", path="/jobs$")  # not /jobsets
    out = kdist("list")
    error_line(out, 3, "429", "after 10 retries")
    assert sent(out, "GET", JOBS) == 11, out.describe()


def test_a_5xx_to_a_create_is_not_sent_again(api, kdist, spec):
    """A 503 asking to retry may come after the Job was stored: not a create to repeat."""
    api.throttle("1", code=503, method="POST", path="/jobs")
    out = kdist("submit", "--no-wait", str(spec))
    error_line(out, 3, "503")
    assert sent(out, "POST", JOBS) == 1, out.describe()


WARNING = ("Warning", '299 - "batch/v1 Job: this cluster prefers something else"')


def test_a_warning_is_printed_once_per_submit(api, kdist, spec):
    api.headers.append(WARNING)
    out = kdist("submit", "--no-wait", str(spec))
    assert out.code == 0, out.describe()
    assert out.stderr.count("this cluster prefers something else") == 1, out.describe()


def test_a_warning_is_printed_once_per_batch(api, kdist, tmp_path):
    api.headers += [WARNING, ("Warning", '299 - "and a second thing"')]
    a = objects.job_yaml(tmp_path / "a.yaml", "alpha")
    b = objects.job_yaml(tmp_path / "b.yaml", "beta")
    out = kdist("submit", "--no-wait", str(a), str(b))
    assert out.code == 0, out.describe()
    assert out.stderr.count("this cluster prefers something else") == 1, out.describe()
    assert out.stderr.count("and a second thing") == 1, out.describe()
