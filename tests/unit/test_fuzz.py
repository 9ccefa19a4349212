"""Hostile input: whatever the spec file holds, kdist either renders manifests that
pass the Kubernetes schemas or refuses with field paths, quickly and in bounded memory."""

from __future__ import annotations

import time
import tracemalloc

import kubernetes_validate
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdist.rendering import render
from kdist.shared.errors import SpecError
from kdist.spec import parse_job
from tests.unit import crd
from tests.unit.helpers import BASE, spec_with

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True), st.text(max_size=30),
    st.sampled_from(["", "auto", "1Gi", "500m", "-1", "1e308", "gloo", "nccl", "0", "a" * 300]),
)
trees = st.recursive(
    scalars,
    lambda kids: st.one_of(st.lists(kids, max_size=4),
                           st.dictionaries(st.text(max_size=12), kids, max_size=4)),
    max_leaves=25,
)
FIELDS = [
    "metadata.name", "metadata.namespace", "metadata.labels", "spec.backend", "spec.image",
    "spec.nodes", "spec.procsPerNode", "spec.workload", "spec.distributed", "spec.resources",
    "spec.env", "spec.envFrom", "spec.checkpoint", "spec.scheduling",
    "spec.ttlSecondsAfterFinished", "spec.activeDeadlineSeconds", "spec.extra",
]


def outcome(text: bytes) -> str:
    """'ok' after every rendered object passes its schema, or 'refused' with paths.

    The checks are the assertions inside: a refusal must name one-line problems
    that start with the file; an accepted spec must render objects that pass the
    Kubernetes schemas; any other exception (a traceback) fails the caller.
    """
    try:
        job = parse_job(text, "fuzz.yaml")
    except SpecError as e:
        assert e.problems and all(p.startswith("fuzz.yaml: ") for p in e.problems)
        assert all("\n" not in p for p in e.problems)
        return "refused"
    for obj in render(job):
        if obj["kind"] in crd.CRDS:
            assert crd.errors(obj) == []
        else:
            kubernetes_validate.validate(obj, "1.37", strict=True)
    return "ok"


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(FIELDS), value=trees)
def test_any_field_value_renders_valid_or_is_refused(field, value):
    text = yaml.safe_dump(spec_with(**{field: value}), allow_unicode=True).encode()
    outcome(text)  # fails inside on a traceback, a bad refusal or an invalid object


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=400))
def test_random_bytes_never_crash(data):
    outcome(data)  # fails inside on a traceback, a bad refusal or an invalid object


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(alphabet="{}[]:-,&*!|>'\"#%@` \n\tab01", max_size=200))
def test_random_yaml_syntax_never_crashes(text):
    outcome(text.encode())  # fails inside on a traceback, a bad refusal or an invalid object


@given(n=st.integers(min_value=1, max_value=60))
@settings(max_examples=60, deadline=None)
def test_names_at_every_length(n):
    doc = spec_with(**{"metadata.name": "a" * n})
    expect = "ok" if n <= 50 else "refused"
    assert outcome(yaml.safe_dump(doc).encode()) == expect


def test_pathological_inputs_bounded_in_time_and_memory():
    cases = [
        b"[" * 100_000,
        b"a: " + b"x" * 900_000,
        ("metadata: {name: " + "\u202e\u0301" * 1000 + "}").encode(),
        b"k: &a [" + b"*a, " * 10 + b"]",
        b"{" + b",".join(b"k%d: v" % i for i in range(30_000)) + b"}",
        b"- " * 10_000,
    ]
    big_env = {f"V{i}": "x" * 99 for i in range(5000)}
    cases.append(yaml.safe_dump(spec_with(**{"spec.env": big_env})).encode())
    for text in cases:
        tracemalloc.start()
        start = time.process_time()  # the parser's own work, not the machine's load
        try:
            render(parse_job(text, "fuzz.yaml"))
        except SpecError:
            pass
        elapsed = time.process_time() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert elapsed < 5.0, (text[:40], elapsed)
        assert peak < 200 << 20, (text[:40], peak)


def test_base_spec_is_ok():
    assert outcome(yaml.safe_dump(BASE).encode()) == "ok"
