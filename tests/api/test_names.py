"""Bad job names and namespaces: exit 2 naming the value, and not one request sent.

The critical defect of issue 14: `kdist delete ""` sent DELETE .../jobs/ (the collection)
and exited 0. A bystander job sits in the namespace in every case here, so a test
also shows whether it would have been deleted.
"""

from __future__ import annotations

import pytest

from tests.api import objects
from tests.api.checks import error_line, names_value
from tests.api.kubeconfigs import write_kubeconfig

# In-process runs: a hang fails the one test, not the session.
pytestmark = pytest.mark.timeout(60)

# The brief's list, plus a trailing newline (a `$`-anchored regex lets it through), a
# space and a non-ASCII letter.
BAD_NAMES = ["", ".", "..", "a/b", "A", "-x", "x" * 64, "a\nb", "ab\n", "%2e", "jobs?x=1",
             "a b", "ä"]
BAD_NAMESPACES = ["Bad_NS", "a/b", "a\n", "", "..", "-ns", "x" * 64]
NAME_VERBS = ["delete", "status", "logs"]


@pytest.fixture(autouse=True)
def bystander(api):
    """A job that must survive whatever the test does."""
    return api.add(objects.job("bystander"))[0]


def refused(out, value: str) -> None:
    line = error_line(out, 2)
    assert names_value(line, value), f"the error does not name {value!r}:\n{out.describe()}"
    assert out.requests == [], f"requests were sent for {value!r}:\n{out.describe()}"


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
@pytest.mark.parametrize("verb", NAME_VERBS)
def test_a_bad_job_name_is_refused_before_any_request(api, kdist, verb, name):
    out = kdist(verb, "--", name)
    assert api.store.names("jobs") == ["bystander"], f"the jobs changed:\n{out.describe()}"
    refused(out, name)


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_submit_replace_refuses_a_bad_name_in_the_spec(api, kdist, tmp_path, name):
    spec = objects.job_yaml(tmp_path / "job.yaml", name)
    out = kdist("submit", "--replace", "--no-wait", str(spec))
    assert api.store.names("jobs") == ["bystander"], f"the jobs changed:\n{out.describe()}"
    line = error_line(out, 2)
    # A spec problem names the field path; naming the value is as good.
    assert "metadata.name" in line or names_value(line, name), out.describe()
    assert out.requests == [], out.describe()


LOOKALIKE = "d\u0435mo"  # a Cyrillic е: shown as itself, the name looks like "demo"


@pytest.mark.parametrize("verb", [*NAME_VERBS, "submit"])
def test_a_lookalike_character_is_shown_escaped_and_named(api, kdist, tmp_path, verb):
    """The error must show what is wrong with the name: as itself, `dеmo` looks right."""
    args = ["submit", "--no-wait", str(objects.job_yaml(tmp_path / "job.yaml", LOOKALIKE))] \
        if verb == "submit" else [verb, LOOKALIKE]
    out = kdist(*args)
    line = error_line(out, 2, "'d\\u0435mo'", "U+0435 (CYRILLIC SMALL LETTER IE) is not ASCII")
    assert LOOKALIKE not in line, out.describe()
    assert out.requests == [], out.describe()


@pytest.mark.parametrize("where", ["flag", "kubeconfig"])
def test_a_lookalike_character_in_a_namespace_is_shown_escaped(api, kdist, tmp_path, where):
    kubeconfig = write_kubeconfig(tmp_path / "kc", api.url,
                                  namespace=LOOKALIKE if where == "kubeconfig" else "default")
    out = kdist(*(["-n", LOOKALIKE] if where == "flag" else []), "list", kubeconfig=kubeconfig)
    error_line(out, 2, "'d\\u0435mo'", "U+0435 (CYRILLIC SMALL LETTER IE)")
    assert out.requests == [], out.describe()


def _verb_args(verb: str, spec) -> list[str]:
    return {"list": ["list"], "status": ["status", "bystander"], "logs": ["logs", "bystander"],
            "delete": ["delete", "bystander"], "submit": ["submit", "--no-wait", str(spec)],
            "submit-replace": ["submit", "--replace", "--no-wait", str(spec)]}[verb]


VERBS = ["list", "status", "logs", "delete", "submit", "submit-replace"]


@pytest.mark.parametrize("namespace", BAD_NAMESPACES, ids=repr)
@pytest.mark.parametrize("verb", VERBS)
def test_a_bad_namespace_flag_is_refused_before_any_request(api, kdist, spec, verb, namespace):
    out = kdist("-n", namespace, *_verb_args(verb, spec))
    assert api.store.names("jobs") == ["bystander"], f"the jobs changed:\n{out.describe()}"
    refused(out, namespace)


@pytest.mark.parametrize("namespace", [ns for ns in BAD_NAMESPACES if ns], ids=repr)
@pytest.mark.parametrize("verb", VERBS)
def test_a_bad_namespace_in_the_kubeconfig_is_refused(api, kdist, spec, tmp_path, verb,
                                                      namespace):
    kubeconfig = write_kubeconfig(tmp_path / "bad-ns-kubeconfig", api.url, namespace=namespace)
    out = kdist(*_verb_args(verb, spec), kubeconfig=kubeconfig)
    refused(out, namespace)


def test_a_missing_context_is_refused_before_any_request(api, kdist):
    out = kdist("--context", "nope", "list")
    error_line(out, 2, "nope")
    assert out.requests == [], out.describe()


def test_a_good_namespace_flag_is_used(api, kdist):
    """The control case: the checks above must not refuse an ordinary namespace."""
    api.add(objects.job("elsewhere", namespace="team-b"))
    out = kdist("-n", "team-b", "status", "elsewhere", "-o", "json")
    assert out.code == 0, out.describe()
    assert ("GET", "/apis/batch/v1/namespaces/team-b/jobs/elsewhere") in out.calls, \
        out.describe()
