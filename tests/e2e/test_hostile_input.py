"""Hostile input against the real API server: whatever a spec file holds, `kdist
submit` either gets it accepted by the API server itself or refuses it with exit
2 and a field path, quickly; nothing is ever half-submitted.

The corpus reuses the unit tier's fuzz strategies (tests/unit/test_fuzz.py),
derandomized so every run sends the same inputs, and runs `kdist submit
--dry-run=server` in-process (the CLI's own code path, no mocks).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdist.cli.main import load, main
from kdist.rendering import render
from tests.unit.helpers import spec_with
from tests.unit.test_fuzz import FIELDS, trees
from tests.unit.test_roundtrip import USER_VALUES, spec_of

from .conftest import Kube, create_namespace, drop_namespace
from .conftest_cli import (  # noqa: F401
    IMAGE,
    job_file_fixture,
    kdist_fixture,
    kubectl,
    leftovers,
    training_resources,
)

EXAMPLES = 120
SECONDS_PER_INPUT = 10.0
SEEN: dict[str, int] = {"accepted": 0, "refused": 0}

# Deliberately at and around every length boundary of a job name (DNS-1035, <= 50).
NAME_LENGTHS = [1, 2, 49, 50, 51, 63, 64, 253]


def submit_dry_run(namespace: str, path: Path) -> tuple[int, str, float]:
    started = time.monotonic()
    res = CliRunner().invoke(main, ["-n", namespace, "submit", str(path), "--dry-run=server"])
    return res.exit_code, res.output, time.monotonic() - started


def check(namespace: str, path: Path, text: str) -> str:
    """One input: accepted by the API server (exit 0) or refused with a field path (exit 2)."""
    path.write_text(text)
    code, out, took = submit_dry_run(namespace, path)
    assert took < SECONDS_PER_INPUT, (took, text[:200])
    assert "Traceback" not in out, out
    if code == 0:
        assert "(server dry run: accepted, nothing persisted)" in out, out
        return "accepted"
    # Never 3: an object kdist rendered and the API server refused would be a kdist bug.
    assert code == 2, f"exit {code} for\n{text[:400]}\n{out}"
    errors = [line for line in out.splitlines() if line.startswith("error: ")]
    assert errors and all(str(path) in e or "-n says" in e for e in errors), out
    return "refused"


def job_text(doc: dict) -> str:
    doc["spec"]["image"] = IMAGE
    # Non-ASCII escaped: a raw U+2028/U+0085 in a file is refused by design (an editor
    # hides the line break), the same value escaped is a valid string.
    return yaml.safe_dump(doc, allow_unicode=False)


@pytest.fixture(scope="module")
def corpus_namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """One namespace for the whole corpus (a fresh one per input would cost seconds each)."""
    name = create_namespace(kube, "hostile-corpus")
    failures = request.session.testsfailed
    yield name
    drop_namespace(kube, name, request.session.testsfailed > failures)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(FIELDS), value=trees)
def test_any_field_value_is_accepted_by_the_api_server_or_refused(
        corpus_namespace, tmp_path_factory, field, value):
    path = tmp_path_factory.mktemp("fuzz") / "job.yaml"
    SEEN[check(corpus_namespace, path, job_text(spec_with(**{field: value})))] += 1


@settings(max_examples=EXAMPLES // 2, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(**USER_VALUES)
def test_hostile_but_valid_values_are_accepted_by_the_api_server(
        corpus_namespace, tmp_path_factory, env, args, labels, job_name, backend):
    """Injection strings in env, args, labels and names: valid, so the API must take them."""
    doc = spec_of(env, args, labels, job_name, backend)
    path = tmp_path_factory.mktemp("valid") / "job.yaml"
    assert check(corpus_namespace, path, job_text(doc)) == "accepted"
    SEEN["accepted"] += 1


@pytest.mark.parametrize("length", NAME_LENGTHS)
@pytest.mark.parametrize("backend", ["indexed-job", "pytorchjob"])
def test_names_at_every_length_boundary(corpus_namespace, tmp_path, length, backend):
    doc = spec_with(**{"metadata.name": "a" * length, "spec.backend": backend})
    want = "accepted" if length <= 50 else "refused"
    assert check(corpus_namespace, tmp_path / "job.yaml", job_text(doc)) == want


@pytest.mark.parametrize("text", [  # an alias fan-out, deep nesting, size, two documents, bytes
    "a: &a [" + "x, " * 10 + "]\nb: &b [" + "*a, " * 10 + "]\nc: [" + "*b, " * 10 + "]\n",
    "[" * 5000 + "]" * 5000,  # deep nesting
    "metadata: {name: x}\n" + "#" * 2_000_000,  # over the size bound
    "apiVersion: kdist/v1alpha1\n---\nkind: Secret\n",  # a second document
    "\x00\x01binary",
])
def test_pathological_files_are_refused_quickly(corpus_namespace, tmp_path, text):
    assert check(corpus_namespace, tmp_path / "job.yaml", text) == "refused"


def test_the_corpus_left_nothing_in_the_namespace(corpus_namespace):
    """Dry runs and refusals persist nothing: count every kind kdist could create."""
    kinds = f"{training_resources()},services,pods"
    objects = kubectl("-n", corpus_namespace, "get", kinds, "-o", "name").stdout.split()
    assert objects == [], objects
    print(f"hostile corpus: {SEEN['accepted']} accepted by the API server, "
          f"{SEEN['refused']} refused with a field path")


def test_a_submission_that_fails_half_way_is_undone(namespace, kdist, job_file):
    """The Service's name is taken: the Job, created first, is deleted again (exit 3)."""
    kubectl("-n", namespace, "create", "service", "clusterip", "squat", "--tcp=80:80")
    path = job_file("squat", resources={"gpus": 64, "cpu": "100m", "memory": "256Mi"})
    sub = kdist("submit", path, "--no-wait")
    assert sub.returncode == 3, sub.stdout + sub.stderr
    assert "already exists" in sub.stderr and "service" in sub.stderr.lower(), sub.stderr
    assert leftovers(namespace, "squat") == []  # no Job, no pods: the squatter has no kdist label
    kubectl("-n", namespace, "get", "service", "squat")  # and the squatter is untouched


def test_injection_strings_reach_the_api_server_exactly(namespace, kdist, job_file):
    """Env, args and labels full of YAML and template syntax arrive as the very strings."""
    tricky = ["\n---\nkind: Secret\nmetadata: {name: x}", "{{ name }}", "{% raw %}", "'\"",
              "a: b", "- x", "&a *a", "!!python/object", "\u2028", "null", "true", "~", "#c",
              "|\n x", "${HOME}", "$(rm -rf /)"]
    env = {f"V{i}": v for i, v in enumerate(tricky)}
    labels = {"team": "a-b_c.d", "example.com/x": "y"}
    path = job_file("inject", env=env, resources={"gpus": 64, "cpu": "100m", "memory": "256Mi"})
    doc = yaml.safe_load(path.read_text())
    doc["metadata"]["labels"] = labels
    doc["spec"]["workload"] = {"command": ["python", "-c", "pass"],
                               "args": ["--max-steps", "1", *tricky]}
    # Escaped, not raw: a raw U+2028 in the file is refused (editors hide the line break).
    path.write_text(yaml.safe_dump(doc, allow_unicode=False))
    assert kdist("submit", path, "--no-wait").returncode == 0
    job = json.loads(kubectl("-n", namespace, "get", "job", "inject", "-o", "json").stdout)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    # What the API server stored is what kdist rendered: no field added, dropped or changed
    # (the API only defaults fieldRef.apiVersion).
    # (as restartMode auto sent it: the in-place form, which this cluster kept)
    (want,) = render(load(str(path), namespace), None, "inPlace")[0]["spec"]["template"][
        "spec"]["containers"]
    assert (container["command"], container["args"]) == (want["command"], want["args"])
    for e in container["env"]:
        e.get("valueFrom", {}).get("fieldRef", {}).pop("apiVersion", None)
    assert container["env"] == want["env"]
    assert {e["name"]: e.get("value") for e in container["env"] if e["name"] in env} == env
    assert container["args"][-len(tricky):] == tricky
    assert all(job["metadata"]["labels"][k] == v for k, v in labels.items())
    assert kubectl("-n", namespace, "get", "secrets", "-o", "name").stdout.split() == []
    made = leftovers(namespace, "inject")
    kinds = {o.split("/")[0] for o in made}
    assert kinds <= {"job.batch", "service", "pod", "endpointslice.discovery.k8s.io"}, made
    assert [o for o in made if o.startswith(("job.batch/", "service/"))] == [
        "job.batch/inject", "service/inject"]
