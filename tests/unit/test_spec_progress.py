"""spec.distributed.progressTimeoutSeconds: optional; 0 = off; env KDIST_PROGRESS_TIMEOUT."""

from __future__ import annotations

import pytest

from kdist import backends
from kdist.rendering import render
from kdist.rendering.render import pod_templates_of
from kdist.runtime.plan import resolve_env
from kdist.spec import validate_job

from .helpers import spec_with
from .test_spec import problems


def pod_env(job) -> dict[str, str]:
    pod = pod_templates_of(render(job))[0]["spec"]
    return {e["name"]: e["value"] for e in pod["containers"][0]["env"] if "value" in e}


def test_off_unless_given():
    assert validate_job(spec_with()).spec.distributed.progress_timeout_seconds == 0
    assert "KDIST_PROGRESS_TIMEOUT" not in pod_env(validate_job(spec_with()))
    zero = validate_job(spec_with(**{"spec.distributed": {"progressTimeoutSeconds": 0}}))
    assert "KDIST_PROGRESS_TIMEOUT" not in pod_env(zero)


@pytest.mark.parametrize("backend", backends.NAMES)
def test_the_limit_reaches_the_launcher_through_the_rendered_pod(backend):
    job = validate_job(spec_with(**{"spec.backend": backend,
                                    "spec.distributed": {"progressTimeoutSeconds": 120}}))
    env = pod_env(job)
    assert env["KDIST_PROGRESS_TIMEOUT"] == "120"
    plan = resolve_env({**env, "KDIST_NODE_RANK": "1", "KDIST_MASTER_ADDR": "m"},
                       gpu_count=lambda: 0)
    assert plan.progress_timeout_s == 120


@pytest.mark.parametrize(("value", "fragment"), [
    (-1, ">= 0"), ("10s", "integer"), (10.5, "integer"), (True, "integer"), (86401, "<= 86400")])
def test_bad_values_are_named(value, fragment):
    found = problems(spec_with(**{"spec.distributed": {"progressTimeoutSeconds": value}}))
    assert any(p.startswith("job.yaml: spec.distributed.progressTimeoutSeconds") and
               fragment in p for p in found), found
