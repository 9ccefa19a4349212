"""A workdir on this machine: `kdist run --local` and the launcher run code that exists
only in the shipped directory, from an unpacked copy of the archive the pods get."""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path

import pytest
from disttools import LAUNCH, free_port, node_env

from kdist.local import local_env, run_local, run_nodes
from kdist.rendering.code_configmaps import to_configmaps
from kdist.rendering.workdir import pack, pack_workdir
from kdist.shared import env as E
from kdist.spec import load_job

# Imports a module of the workdir (PYTHONPATH), reads a data file relative to its
# directory, writes next to itself (the copy is writable), and says where it ran.
SCRIPT = """\
import json, os, sys
import helpers.version as v
with open("data/greeting.txt") as f:
    greeting = f.read().strip()
with open(f"written-by-{os.environ['RANK']}", "w") as f:
    f.write("ok")
print(json.dumps({"event": "ran", "rank": int(os.environ["RANK"]), "cwd": os.getcwd(),
                  "version": v.VERSION, "greeting": greeting, "script": __file__,
                  "module": os.path.realpath(v.__file__),
                  "sha": os.environ.get("KDIST_CODE_SHA256")}), flush=True)
"""

JOB = """\
apiVersion: kdist/v1alpha1
kind: TrainingJob
metadata: {{name: from-workdir}}
spec:
  image: kdist-train:test
  nodes: 2
  workdir: code
  workload: {{command: [python, only_here.py]}}
  distributed: {{backend: gloo, port: {port}}}
  resources: {{cpu: "1", memory: 1Gi}}
"""


def code_tree(root: Path, version: str) -> Path:
    (root / "helpers").mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / "only_here.py").write_text(SCRIPT)
    (root / "helpers" / "__init__.py").write_text("")
    (root / "helpers" / "version.py").write_text(f"VERSION = {version!r}\n")
    (root / "data" / "greeting.txt").write_text("hello\n")
    return root


def ran(text: str) -> dict[int, dict]:
    out = {}
    for line in text.splitlines():
        _, _, body = line.partition("] ")
        if body.startswith('{"event": "ran"'):
            event = json.loads(body)
            out[event["rank"]] = event
    return out


def tree_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.timeout(180)
def test_run_local_runs_the_workdir_from_a_fresh_copy(tmp_path, monkeypatch):
    project = tmp_path / "project"
    src = code_tree(project / "code", "v1")
    (project / "job.yaml").write_text(JOB.format(port=free_port()))
    monkeypatch.chdir(tmp_path)  # not the project: spec.workdir is relative to the job file
    job = load_job(project / "job.yaml")
    code = pack_workdir(job)
    out = io.StringIO()
    assert run_local(job, stdout=out, code=code) == 0, out.getvalue()
    workspace = tmp_path / ".kdist" / "from-workdir" / "workspace"
    events = ran(out.getvalue())
    assert sorted(events) == [0, 1], out.getvalue()
    for event in events.values():
        assert event["cwd"] == str(workspace)
        assert (event["version"], event["greeting"]) == ("v1", "hello")
        assert event["module"] == str(workspace / "helpers" / "version.py")
    assert not (src / "written-by-0").exists()  # the copy ran, not the source tree
    shipped = tree_of(workspace)
    assert shipped.pop("written-by-0") == shipped.pop("written-by-1") == b"ok"
    assert shipped == tree_of(src)  # byte for byte

    # Edited and run again: the new version runs, nothing of the last run is left.
    (src / "helpers" / "version.py").write_text("VERSION = 'v2'\n")
    (src / "data" / "greeting.txt").unlink()
    (src / "data" / "greeting.txt").write_text("hi again\n")
    (workspace / "stale.txt").write_text("from before")
    out = io.StringIO()
    job = load_job(project / "job.yaml")
    assert run_local(job, stdout=out, code=pack_workdir(job)) == 0, out.getvalue()
    assert {(e["version"], e["greeting"]) for e in ran(out.getvalue()).values()} == {
        ("v2", "hi again")}
    assert not (workspace / "stale.txt").exists()


@pytest.mark.timeout(120)
def test_the_launcher_unpacks_what_a_pod_mounts(tmp_path):
    """A pod's node, on this machine: the ConfigMaps' parts in a directory, the hash in
    the env; the launcher checks, unpacks into its code dir and starts the worker there."""
    code = pack(code_tree(tmp_path / "src", "pod"))
    mount = tmp_path / "mount"
    mount.mkdir()
    for cm in to_configmaps("pod-job", "ns", code, {}):
        for key, data in cm["binaryData"].items():
            (mount / key).write_bytes(base64.b64decode(data))
    env = node_env(1, 2, 0, free_port(), **{E.CODE_SHA256: code.sha256, E.CODE_SRC: str(mount),
                                            E.CODE_DIR: str(tmp_path / "workspace")})
    out = io.StringIO()
    argv = [*LAUNCH, "--", "python", "only_here.py"]
    assert run_nodes(argv, [local_env(env)], stdout=out, cwd=tmp_path) == 0, out.getvalue()
    events = ran(out.getvalue())
    assert sorted(events) == [0, 1], out.getvalue()
    for event in events.values():
        assert event["cwd"] == str(tmp_path / "workspace")
        assert event["version"] == "pod" and event["sha"] == code.sha256
    assert "unpacked into" in out.getvalue()
    assert os.listdir(mount) == ["part-0000-of-0001"]  # read, never written
