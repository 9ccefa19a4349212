"""Every pod has a writable HOME, whatever the image: pods run as UID 1000, and an image
without that user would give them HOME=/ (Hugging Face, torch hub and triton caches then
fail with EACCES). kdist renders HOME on an emptyDir, first in the env so spec.env can say
$(HOME); spec.env's HOME wins, and a local run keeps this machine's."""

from __future__ import annotations

from typing import Any

import pytest

from kdist import backends
from kdist.rendering import render
from kdist.rendering.contract import pod_env
from kdist.shared import env as E
from kdist.spec import validate_job
from tests.unit import restricted
from tests.unit.helpers import spec_with


def pods(**changes: Any) -> list[dict[str, Any]]:
    job = validate_job(spec_with(**changes))
    return [p for o in render(job) for p in restricted.pod_specs(o)]


def home_of(pod: dict[str, Any]) -> tuple[str | None, list[str]]:
    """HOME in the container's env, and the volumes mounted there."""
    c = pod["containers"][0]
    env = [e for e in c["env"] if e["name"] == "HOME"]
    assert len(env) <= 1
    volumes = {v["name"]: v for v in pod["volumes"]}
    at = [m["name"] for m in c["volumeMounts"] if m["mountPath"].rstrip("/") == E.DEFAULT_HOME]
    for name in at:
        assert name in volumes
    return (env[0]["value"] if env else None), at


@pytest.mark.parametrize("backend", backends.NAMES)
def test_every_pod_gets_a_writable_home_on_an_empty_dir(backend):
    for pod in pods(**{"spec.backend": backend, "spec.env": {"HF_HOME": "$(HOME)/hf"}}):
        home, at = home_of(pod)
        assert (home, at) == (E.DEFAULT_HOME, ["kdist-home"])
        assert {"name": "kdist-home", "emptyDir": {}} in pod["volumes"]
        names = [e["name"] for e in pod["containers"][0]["env"]]
        assert names.index("HOME") < names.index("HF_HOME")  # so $(HOME) expands there


def test_spec_env_home_wins_and_nothing_is_mounted():
    for pod in pods(**{"spec.env": {"HOME": "/data/me"}}):
        assert home_of(pod) == ("/data/me", [])
        assert "kdist-home" not in {v["name"] for v in pod["volumes"]}


def test_a_volume_of_the_spec_at_that_path_is_the_home():
    for pod in pods(**{"spec.pod.volumes": [{"name": "h", "mountPath": E.DEFAULT_HOME,
                                             "persistentVolumeClaim": {"claimName": "h"}}]}):
        assert home_of(pod) == (E.DEFAULT_HOME, ["h"])


def test_a_local_run_keeps_this_machines_home(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    job = validate_job(spec_with())
    env = pod_env(job, node_rank=0, master_addr="127.0.0.1", local=True)
    assert env["HOME"] == "/home/someone"
    job = validate_job(spec_with(**{"spec.env": {"HOME": "/x"}}))
    assert pod_env(job, node_rank=0, master_addr="127.0.0.1", local=True)["HOME"] == "/x"
