"""spec.runtime: the runtime zip, `auto`, rendering, and the bootstrap's refusals."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from kdist import backends
from kdist.rendering import render, runtime_ship
from kdist.shared import env as E
from kdist.shared import labels as L
from kdist.shared.errors import SpecError
from kdist.shared.names import MAX_JOB_NAME
from kdist.spec import validate_job
from tests.unit import crd, restricted
from tests.unit.helpers import spec_with

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = backends.NAMES
BARE = "docker.io/pytorch/pytorch:2.9.0-cuda12.8-cudnn9-runtime"


def job_with(**changes: Any):
    return validate_job(spec_with(**{"metadata.namespace": "ml", **changes}))


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for spec in restricted.pod_specs(obj) for c in spec["containers"]]


# --- the zip ----------------------------------------------------------------------------


def test_the_zip_is_the_same_bytes_every_time_and_fits_one_configmap():
    first = runtime_ship.built()
    runtime_ship.built.cache_clear()
    again = runtime_ship.built()
    assert again.data == first.data and again.sha256 == hashlib.sha256(first.data).hexdigest()
    # One ConfigMap that a client-side `kubectl apply` can still copy into its
    # last-applied annotation: every annotation of an object together may hold 256 KiB.
    # Asked of the ConfigMap itself (the longest job name, a job's labels), with 4 KiB
    # left for kubectl's own keys: past it, the runtime must shrink or span objects.
    cm = runtime_ship.configmap("j" * MAX_JOB_NAME, "n" * 63, first,
                                {k: "v" * 63 for k in (L.INSTANCE, L.NAME, L.MANAGED_BY)})
    applied = json.dumps(cm, separators=(",", ":"))
    annotations = len(applied) + sum(len(k) + len(v) for k, v in
                                     cm["metadata"]["annotations"].items())
    assert annotations <= 256 * 2**10 - 4 * 2**10, (len(first.data), annotations)
    names = zipfile.ZipFile(io.BytesIO(first.data)).namelist()
    assert names[:2] == ["kdist/__init__.py", "kdist/launch.py"]
    assert {"kdist/runtime/launch.py", "kdist/runtime/workdir.py"} <= set(names)
    assert "kdist/runtime/sitehook/sitecustomize.py" in names
    assert "kdist/workloads/ddp.py" in names
    assert not any(n.startswith(("kdist/cli/", "kdist/api/", "kdist/kube/", "kdist/rendering/",
                                 "kdist/spec/")) for n in names)


def test_every_module_in_the_zip_imports_from_the_zip_alone(tmp_path):
    """The zip is closed under imports: with it first on the path, every kdist module a pod
    loads comes from it (a missing one would fail, not fall back to an installed kdist)."""
    path = tmp_path / E.RUNTIME_ZIP
    path.write_bytes(runtime_ship.built().data)
    modules = [n[:-3].replace("/", ".").removesuffix(".__init__")
               for n in zipfile.ZipFile(path).namelist() if "sitehook" not in n]
    code = (f"import importlib, json, sys; sys.path.insert(0, {str(path)!r}); "
            f"mods = {modules!r}; out = {{}}\n"
            "for m in mods: out[m] = importlib.import_module(m).__file__\n"
            "print(json.dumps(out))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""})
    assert out.returncode == 0, out.stderr
    files = json.loads(out.stdout)
    assert len(files) == len(modules) > 40
    assert all(f.startswith(str(path) + os.sep) for f in files.values()), files


# --- auto ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("image", "mode"), [
    ("kdist-train:dev-cpu", "image"),
    ("registry.example/ml/kdist-train:0.1.0", "image"),
    ("registry.example:5000/kdist-train@sha256:" + "a" * 64, "image"),
    (BARE, "shipped"),
    ("registry.example/kdist-train-custom:1", "shipped"),
    ("kdist-trainer:1", "shipped"),
    ("registry.example/kdist-train/other:1", "shipped"),
])
def test_auto_ships_the_runtime_unless_the_image_is_kdists_own(image, mode):
    assert runtime_ship.mode(job_with(**{"spec.image": image})) == mode


@pytest.mark.parametrize("chosen", ["image", "shipped"])
def test_an_explicit_runtime_wins_over_the_image_name(chosen):
    for image in ("kdist-train:dev-cpu", BARE):
        assert runtime_ship.mode(job_with(**{"spec.image": image, "spec.runtime": chosen})) \
            == chosen


def test_an_unknown_runtime_is_refused_by_field():
    with pytest.raises(SpecError, match="spec.runtime"):
        job_with(**{"spec.runtime": "zip"})


# --- rendering ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_shipped_runtime_renders_one_owned_configmap_and_the_bootstrap(backend):
    job = job_with(**{"spec.image": BARE, "spec.backend": backend, "spec.nodes": 2})
    objects = render(job)
    runtime = runtime_ship.built()
    cms = [o for o in objects if o["kind"] == "ConfigMap"]
    assert len(cms) == 1 and objects.index(cms[0]) > 0  # after the training object: owned
    cm = cms[0]
    assert cm["immutable"] is True
    assert cm["metadata"]["name"] == f"{job.metadata.name}-runtime-{runtime.sha256[:10]}"
    assert cm["metadata"]["namespace"] == "ml"
    assert cm["metadata"]["labels"][L.INSTANCE] == job.metadata.name
    assert cm["metadata"]["annotations"][L.RUNTIME_SHA256] == runtime.sha256
    assert base64.b64decode(cm["binaryData"][E.RUNTIME_ZIP]) == runtime.data
    image_args = containers(render(job_with(**{"spec.backend": backend, "spec.nodes": 2}))[0])
    for spec, c, baked in zip(restricted.pod_specs(objects[0]), containers(objects[0]),
                              image_args, strict=True):
        assert c["command"] == ["python3", "-c", runtime_ship.BOOT, runtime.sha256]
        assert c["args"] == baked["args"]  # the launcher gets the same arguments
        assert {"name": E.RUNTIME_SHA256, "value": runtime.sha256} in c["env"]
        assert {"name": "kdist-runtime", "mountPath": E.DEFAULT_RUNTIME_MOUNT,
                "readOnly": True} in c["volumeMounts"]
        assert {"name": "kdist-runtime", "configMap": {"name": cm["metadata"]["name"],
                                                       "defaultMode": 0o444}} in spec["volumes"]
    for obj in objects:
        if obj["kind"] not in crd.CRDS:  # its schema: tests/unit/test_render.py's CRD check
            kubernetes_validate.validate(obj, "1.37", strict=True)
    for spec in restricted.pod_specs(objects[0]):
        assert restricted.violations(spec) == []


def test_kdists_own_image_renders_no_runtime_configmap():
    objects = render(job_with())
    assert "kdist-train" in objects[0]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert not any(o["kind"] == "ConfigMap" for o in objects)
    (c,) = containers(objects[0])
    assert c["command"] == ["python", "-m", "kdist.launch"]
    assert not any(e["name"] == E.RUNTIME_SHA256 for e in c["env"])


def test_the_shipped_runtime_goes_beside_a_shipped_workdir(tmp_path):
    from kdist.rendering.workdir import pack

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    objects = render(job_with(**{"spec.image": BARE}), pack(tmp_path / "code"))
    kinds = [(o["kind"], o["metadata"]["name"].split("-")[-2]) for o in objects]
    assert [k for k, _ in kinds] == ["Job", "Service", "ConfigMap", "ConfigMap"]
    (spec,) = restricted.pod_specs(objects[0])
    assert {v["name"] for v in spec["volumes"]} >= {"kdist-code", "kdist-runtime"}


# --- the bootstrap, run as a pod would run it ---------------------------------------------


def boot(tmp_path: Path, digest: str, *args: str, python: str = sys.executable):
    env = {**os.environ, E.RUNTIME_DIR: str(tmp_path)}
    return subprocess.run([python, "-c", runtime_ship.BOOT, digest, *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)


def test_a_tampered_runtime_is_refused_with_exit_2(tmp_path):
    runtime = runtime_ship.built()
    data = bytearray(runtime.data)
    data[100] ^= 1
    (tmp_path / E.RUNTIME_ZIP).write_bytes(bytes(data))
    out = boot(tmp_path, runtime.sha256, "--", "true")
    assert out.returncode == 2, out
    assert out.stderr.strip().startswith("kdist: the shipped runtime ")
    assert f"this pod was made for {runtime.sha256[:12]}: refused" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_missing_runtime_is_refused_with_exit_2(tmp_path):
    out = boot(tmp_path, runtime_ship.built().sha256, "--", "true")
    assert out.returncode == 2 and "cannot read the shipped runtime" in out.stderr, out


def test_the_bootstrap_runs_the_launcher_from_the_zip(tmp_path):
    """`--help` is the launcher's own (argparse); the module it ran was the zip's."""
    runtime = runtime_ship.built()
    (tmp_path / E.RUNTIME_ZIP).write_bytes(runtime.data)
    out = boot(tmp_path, runtime.sha256, "--help")
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout and "--module" in out.stdout
    # The same bootstrap, saying where kdist.launch is found: in the zip.
    env = {**os.environ, E.RUNTIME_DIR: str(tmp_path)}
    code = runtime_ship.BOOT.replace(
        'runpy.run_module(', 'print(__import__("importlib.util").util.find_spec('
        '"kdist.launch").origin); runpy.run_module(')
    out = subprocess.run([sys.executable, "-c", code, runtime.sha256, "--help"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.splitlines()[0] == str(tmp_path / E.RUNTIME_ZIP / "kdist" / "launch.py")


# --- status -----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_status_says_the_runtime_was_shipped_and_which(backend):
    from kdist.kube.watch.tracker import Tracker

    for image, shipped in ((BARE, True), ("kdist-train:dev-cpu", False)):
        obj = render(job_with(**{"spec.image": image, "spec.backend": backend}))[0]
        t = Tracker("unit-job", "ml")
        t.job_event("ADDED", obj)
        want = runtime_ship.built().sha256 if shipped else None
        assert t.state.to_dict()["runtime"] == want
