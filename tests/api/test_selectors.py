"""-l on `wait` and `list --watch`: refused before any request unless the API server would
parse it, sent as given when it would, and `wait -l` matching nothing is an error."""

from __future__ import annotations

import pytest

from tests.api import objects
from tests.api.checks import error_line

pytestmark = pytest.mark.timeout(60)

VERBS = {"wait": ["wait", "--timeout", "5", "-l"], "list --watch": ["list", "--watch", "-l"]}
BAD = ["a b", "team in ()", "team=a,", "gen>x", "Bad_Prefix/a=b", "team=a\n", "team=\t",
       "team=" + "v" * 64]


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("selector", BAD, ids=ascii)
def test_a_bad_selector_is_refused_before_any_request(api, kdist, verb, selector):
    out = kdist(*VERBS[verb], selector)
    error_line(out, 2, "-l/--selector")
    assert out.requests == [], out.describe()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("verb", VERBS)
def test_a_selector_that_is_not_utf8_is_refused(api, kdist_proc, verb):
    """As a shell passes it: the byte 0xff in argv (Python sees the surrogate U+DCFF)."""
    out = kdist_proc(*VERBS[verb], "team=\udcff", limit=30)
    error_line(out, 2, "-l/--selector", "not allowed")
    assert out.requests == [], out.describe()


def test_a_good_selector_is_sent_as_written(api, kdist):
    job = api.add(objects.job("alpha", outcome="Complete"))[0]
    job["metadata"]["labels"]["team"] = "a"
    api.store.update(job)
    out = kdist("wait", "--timeout", "5", "-l", "team in (a,b),!gone")
    assert out.code == 0, out.describe()
    assert "job alpha succeeded" in out.stdout, out.describe()
    sent = {r.query.get("labelSelector") for r in out.requests if r.path.endswith("/jobs")}
    assert sent == {"app.kubernetes.io/managed-by=kdist,team in (a,b),!gone"}, out.describe()


def test_wait_on_a_selector_that_matches_nothing_is_an_error(api, kdist):
    """A typo (`tema=a`) must not read as "every job succeeded"."""
    api.add(objects.job("alpha", outcome="Complete"))
    out = kdist("wait", "--timeout", "5", "-l", "tema=a")
    error_line(out, 2, "no kdist job in namespace default matches -l 'tema=a'")


def test_wait_all_with_no_jobs_is_not_an_error(api, kdist):
    out = kdist("wait", "--all", "--timeout", "5")
    assert out.code == 0 and "no kdist jobs to wait for" in out.stdout, out.describe()
