"""kubectl habits: the global flags after the verb as well as before it (the one after wins),
and `list -l` filtering as `kubectl get -l` does."""

from __future__ import annotations

import re

import pytest

from tests.api import objects
from tests.api.checks import error_line
from tests.api.kubeconfigs import write_kubeconfig

#: A discovery request (is an operated backend's API group served?), in no namespace.
DISCOVERY = re.compile(r"/apis/[^/]+/[^/]+")

pytestmark = pytest.mark.timeout(60)


def labelled(name: str, namespace: str = "default", **labels: str) -> dict:
    job = objects.job(name, namespace=namespace)
    job["metadata"]["labels"].update(labels)
    return job


def test_namespace_after_the_verb(api, kdist):
    job = api.add(objects.job("demo", namespace="team-a"))[0]
    api.add(objects.pod(job, 0), objects.pod(job, 1))
    out = kdist("status", "demo", "-n", "team-a", "-o", "json")
    assert out.code == 0, out.describe()
    assert all("/namespaces/team-a/" in r.path for r in out.requests
               if not DISCOVERY.fullmatch(r.path)), out.describe()


def test_after_the_verb_wins_over_before_it(api, kdist):
    api.add(objects.job("demo", namespace="team-a"))
    out = kdist("-n", "team-b", "delete", "demo", "--namespace", "team-a", "--no-wait")
    assert out.code == 0, out.describe()
    assert "deleted job.batch/demo" in out.stdout and "namespace team-a" in out.stdout


def test_kubeconfig_and_timeout_after_the_verb(api, kdist, tmp_path):
    """The fixture's --kubeconfig (before the verb) points nowhere; the one after wins."""
    api.add(objects.job("alpha"))
    good = write_kubeconfig(tmp_path / "good", api.url)
    nowhere = write_kubeconfig(tmp_path / "nowhere", "https://127.0.0.1:9")
    out = kdist("list", "--kubeconfig", str(good), "--request-timeout", "5",
                kubeconfig=nowhere)
    assert out.code == 0 and "alpha" in out.stdout, out.describe()


def test_a_bad_global_flag_after_the_verb_is_refused(api, kdist):
    out = kdist("list", "--request-timeout", "nan")
    assert out.code == 2 and "--request-timeout" in out.stderr, out.describe()
    assert out.requests == [], out.describe()


@pytest.mark.parametrize("selector,shown", [
    ("team=a", {"alpha"}),
    ("team!=a", {"beta", "plain"}),
    ("team in (a,b)", {"alpha", "beta"}),
    ("team notin (a)", {"beta", "plain"}),
    ("team", {"alpha", "beta"}),
    ("!team", {"plain"}),
    ("team=a,tier=gpu", set()),
])
def test_list_selector_filters_as_kubectl_get(api, kdist, selector, shown):
    api.add(labelled("alpha", team="a"), labelled("beta", team="b"), labelled("plain"),
            labelled("other", namespace="team-b", team="a"))
    out = kdist("list", "-l", selector)
    assert out.code == 0, out.describe()
    listed = {name for name in ("alpha", "beta", "plain", "other") if name in out.stdout}
    assert listed == shown, out.describe()
    sent = {r.query.get("labelSelector") for r in out.requests
            if r.path.endswith(("/jobs", "/pytorchjobs", "/jobsets"))}
    assert sent == {f"app.kubernetes.io/managed-by=kdist,{selector}"}, out.describe()
    if not shown:
        assert f"no kdist jobs found matching -l {selector!r}" in out.stdout


def test_list_selector_all_namespaces(api, kdist):
    api.add(labelled("alpha", team="a"), labelled("other", namespace="team-b", team="a"),
            labelled("beta", namespace="team-b", team="b"))
    out = kdist("list", "-A", "-l", "team=a")
    assert out.code == 0, out.describe()
    assert "alpha" in out.stdout and "other" in out.stdout and "beta" not in out.stdout


def test_list_bad_selector_refused_before_any_request(api, kdist):
    out = kdist("list", "-l", "team in ()")
    error_line(out, 2, "-l/--selector")
    assert out.requests == [], out.describe()
