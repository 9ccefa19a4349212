"""spec.workdir / --workdir beyond packing: the spec field, rendering, the launcher's step,
the tracker's hash, the client's clean-up and the RBAC it needs."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from kdist import backends
from kdist.kube import kinds
from kdist.kube.client import Cluster
from kdist.kube.watch.sources import wait_gone
from kdist.kube.watch.tracker import Tracker
from kdist.rendering import addons, render, with_backend
from kdist.rendering.code_configmaps import CHUNK_BYTES
from kdist.rendering.workdir import WorkdirError, pack, pack_workdir
from kdist.runtime import workdir as launch_code
from kdist.shared import env as E
from kdist.shared import labels as L
from kdist.shared.errors import LaunchError, SpecError
from kdist.spec import load_job, validate_job
from tests.unit import crd, restricted
from tests.unit.golden import ROOT
from tests.unit.helpers import spec_with, write_spec

K8S_VERSION = "1.37"
BACKENDS = backends.NAMES
TRAINING_KINDS = {"indexed-job": ["Job", "Service"], "pytorchjob": ["PyTorchJob"],
                  "jobset": ["JobSet"], "trainjob": ["TrainJob", "TrainingRuntime"]}


def tree(root: Path, big: int = 0) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("import pkg\nprint(pkg.V)\n")
    (root / "pkg" / "__init__.py").write_text("V = 1\n")
    if big:  # incompressible: `big` bytes stay about that big in the archive
        (root / "weights.bin").write_bytes(os.urandom(big))
    return root


def job_with(backend: str, **changes: Any):
    return validate_job(spec_with(**{"spec.backend": backend, "metadata.namespace": "ml",
                                     "metadata.labels": {"team": "nlp"}, **changes}))


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return restricted.pod_specs(obj)


# --- rendering ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_code_renders_configmaps_after_the_training_objects(tmp_path, backend):
    code = pack(tree(tmp_path / "src", big=3 * CHUNK_BYTES))
    objects = render(job_with(backend), code)
    kinds_ = [o["kind"] for o in objects]
    n = len(kinds_) - len(TRAINING_KINDS[backend])
    # The first object owns the rest when submitted: the training object comes first.
    assert kinds_ == TRAINING_KINDS[backend] + ["ConfigMap"] * n and n >= 4
    configmaps = objects[-n:]
    names = [cm["metadata"]["name"] for cm in configmaps]
    assert b"".join(base64.b64decode(next(iter(cm["binaryData"].values())))
                    for cm in configmaps) == code.archive
    for cm in configmaps:
        meta = cm["metadata"]
        assert meta["namespace"] == "ml" and "ownerReferences" not in meta
        assert meta["labels"]["team"] == "nlp" and meta["labels"][L.JOB_NAME] == "unit-job"
        assert meta["annotations"][L.CODE_SHA256] == code.sha256
        kubernetes_validate.validate(cm, K8S_VERSION, strict=True)
    specs = [p for o in objects for p in pod_specs(o)]  # a TrainJob's: its runtime's
    assert len(specs) == (2 if backend == "pytorchjob" else 1)
    for pod in specs:
        volumes = {v["name"]: v for v in pod["volumes"]}
        sources = volumes["kdist-code"]["projected"]["sources"]
        assert [s["configMap"]["name"] for s in sources] == names  # in order, all of them
        assert volumes["kdist-workspace"] == {"name": "kdist-workspace", "emptyDir": {}}
        (c,) = pod["containers"]
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        assert mounts["kdist-code"] == {"name": "kdist-code", "readOnly": True,
                                        "mountPath": E.DEFAULT_CODE_MOUNT}
        assert mounts["kdist-workspace"]["mountPath"] == E.DEFAULT_CODE_DIR
        assert "readOnly" not in mounts["kdist-workspace"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env[E.CODE_SHA256] == code.sha256
        assert restricted.violations(pod) == []  # projected + emptyDir: still "restricted"
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod",
                                      "metadata": {"name": "p"}, "spec": pod},
                                     K8S_VERSION, strict=True)
    for obj in objects[:-n]:
        if obj["kind"] in crd.CRDS:
            assert crd.errors(obj) == []
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_code_nothing_changes(tmp_path, backend):
    job = job_with(backend)
    objects = render(job)
    assert render(job, None) == objects
    assert [o["kind"] for o in objects] == TRAINING_KINDS[backend]
    for pod in [p for o in objects for p in pod_specs(o)]:
        assert {v["name"] for v in pod["volumes"]} == {"dshm", "kdist-home"}
        assert E.CODE_SHA256 not in {e["name"] for e in pod["containers"][0]["env"]}


def test_a_checkpoint_at_the_workspace_is_refused(tmp_path):
    code = pack(tree(tmp_path / "src"))
    job = job_with("indexed-job", **{"spec.checkpoint": {"path": "/workspace/",
                                                         "volume": {"emptyDir": {}}}})
    render(job)  # without code, /workspace is just a path
    with pytest.raises(SpecError, match=r"^spec.checkpoint.path: /workspace/ is where the "):
        render(job, code)


def test_the_parse_back_check_catches_a_missing_part(tmp_path, monkeypatch):
    import importlib

    from kdist.shared.errors import RenderError

    render_module = importlib.import_module("kdist.rendering.render")  # the package's
    # attribute of that name is the function

    code = pack(tree(tmp_path / "src"))
    real = render_module._code_volumes

    def drop_sources(configmaps):
        volumes = real(configmaps)
        volumes[0]["projected"]["sources"] = []
        return volumes

    monkeypatch.setattr(render_module, "_code_volumes", drop_sources)
    with pytest.raises(RenderError, match="mount code ConfigMaps"):
        render(job_with("indexed-job"), code)


# --- the spec field and the flag ------------------------------------------------------------


def test_spec_workdir_is_relative_to_the_job_file(tmp_path, monkeypatch):
    tree(tmp_path / "proj" / "code")
    path = write_spec(tmp_path / "proj", spec_with(**{"spec.workdir": "code"}))
    monkeypatch.chdir(tmp_path)  # elsewhere: the job file's directory decides
    job = load_job(Path("proj") / path.name)
    assert job.spec.workdir == os.path.join("proj", "code")
    code = pack_workdir(job)
    assert code is not None and code.origin == "spec.workdir" and code.files == 2
    absolute = load_job(write_spec(tmp_path, spec_with(**{"spec.workdir": str(tmp_path)}),
                                   "abs.yaml"))
    assert absolute.spec.workdir == str(tmp_path)
    assert pack_workdir(validate_job(spec_with())) is None


@pytest.mark.parametrize("bad", ["", "  ", "a\0b"])
def test_a_blank_workdir_is_a_spec_error(bad):
    with pytest.raises(SpecError, match=r"spec.workdir: .* must be a directory path"):
        validate_job(spec_with(**{"spec.workdir": bad}))


def test_the_flag_wins_and_its_problems_name_it(tmp_path):
    job = validate_job(spec_with(**{"spec.workdir": str(tmp_path / "missing")}))
    with pytest.raises(WorkdirError, match=r"^spec.workdir: .*missing does not exist$"):
        pack_workdir(job)
    flag = pack_workdir(job, tree(tmp_path / "other"))
    assert flag is not None and flag.origin == "--workdir"
    with pytest.raises(WorkdirError, match=r"^--workdir: .*nowhere does not exist$"):
        pack_workdir(job, tmp_path / "nowhere")


# --- the launcher ------------------------------------------------------------------------


def parts_of(code, where: Path) -> Path:
    from kdist.rendering.code_configmaps import to_configmaps

    where.mkdir()
    for cm in to_configmaps("j", None, code, {}):
        for key, data in cm["binaryData"].items():
            (where / key).write_bytes(base64.b64decode(data))
    return where


def test_the_launcher_unpacks_and_moves_in(tmp_path, monkeypatch):
    code = pack(tree(tmp_path / "src"))
    monkeypatch.chdir(tmp_path)  # restored after the test: use_shipped_code changes it
    environ = {E.CODE_SHA256: code.sha256, E.CODE_SRC: str(parts_of(code, tmp_path / "mnt")),
               E.CODE_DIR: str(tmp_path / "ws"), "PYTHONPATH": "/opt/lib"}
    launch_code.use_shipped_code(environ)
    assert Path.cwd() == tmp_path / "ws"
    assert (tmp_path / "ws" / "pkg" / "__init__.py").read_text() == "V = 1\n"
    assert environ["PYTHONPATH"] == os.pathsep.join([str(tmp_path / "ws"), "/opt/lib"])
    before = dict(os.environ)
    launch_code.use_shipped_code({})  # no hash: no code, nothing changes
    assert Path.cwd() == tmp_path / "ws" and dict(os.environ) == before


def test_the_launcher_refuses_code_that_is_not_what_was_sent(tmp_path, monkeypatch):
    code = pack(tree(tmp_path / "src"))
    monkeypatch.chdir(tmp_path)
    environ = {E.CODE_SHA256: "0" * 64, E.CODE_SRC: str(parts_of(code, tmp_path / "mnt")),
               E.CODE_DIR: str(tmp_path / "ws")}
    with pytest.raises(LaunchError, match="hash mismatch") as e:
        launch_code.use_shipped_code(environ)
    assert e.value.exit_code == 2 and Path.cwd() == tmp_path
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").iterdir())


def test_the_launcher_exits_2_with_one_line_before_any_worker(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), E.NNODES: "1", E.NPROC_PER_NODE: "1",
           E.CODE_SHA256: "ab" * 32, E.CODE_SRC: str(tmp_path / "absent"),
           E.CODE_DIR: str(tmp_path / "ws")}
    r = subprocess.run([sys.executable, "-m", "kdist.launch", "--", "python", "x.py"],
                       env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    # The launcher's own lines are on stdout, beside its workers' (docs/security.md).
    errors = [line for line in (r.stdout + r.stderr).splitlines() if "absent" in line]
    assert errors == [f"kdist.launch: {tmp_path / 'absent'}: not a directory of code parts "
                      "nor a part file"], r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr


# --- status, delete, RBAC -----------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_status_knows_the_code_hash(tmp_path, backend):
    code = pack(tree(tmp_path / "src"))
    tracker = Tracker("unit-job", "ml")
    tracker.job_event("ADDED", render(job_with(backend), code)[0])
    assert tracker.state.code == code.sha256
    assert tracker.state.to_dict()["code"] == code.sha256
    plain = Tracker("unit-job", "ml")
    plain.job_event("ADDED", render(job_with(backend))[0])
    assert plain.state.code == "" and plain.state.to_dict()["code"] is None


class FakeCluster(Cluster):
    """Cluster's delete logic over a dict of objects; no connection."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = {(o["kind"], o["metadata"]["name"]): o for o in objects}
        self.calls: list[tuple[str, str, str]] = []
        # No operator, no Kueue.
        self._served = {**{b.kind: False for b in backends.BACKENDS if b.installs},
                        kinds.WORKLOAD: False, **{k: False for k in kinds.PODGROUPS}}
        self._lock = threading.Lock()
        self.request_timeout = 15.0

    def list_objects(self, kind, namespace, **selectors):
        self.calls.append(("list", kind.plural, selectors.get("label_selector", "")))
        key, _, value = selectors["label_selector"].partition("=")
        return [o for (k, _), o in self.objects.items() if k == kind.kind
                and o["metadata"]["labels"].get(key) == value]

    def get(self, kind, name, namespace):
        from kdist.shared.errors import JobNotFound

        try:
            return self.objects[(kind.kind, name)]
        except KeyError:
            raise JobNotFound(name) from None

    def delete_object(self, kind, name, namespace, *, uid=None):
        stored = self.get(kind, name, namespace)
        assert uid == stored["metadata"].get("uid"), "each delete carries the uid checked"
        self.calls.append(("delete", kind.plural, name))
        del self.objects[(kind.kind, name)]


def test_delete_removes_code_configmaps_that_nothing_owns(tmp_path):
    code = pack(tree(tmp_path / "src", big=2 * CHUNK_BYTES))
    applied = render(job_with("indexed-job"), code)  # as `kubectl apply` made them: no owner
    owned = render(validate_job(spec_with(**{"metadata.name": "other"})), code)
    for cm in owned[2:]:
        cm["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "other", "uid": "u"}]
    mine = {o["metadata"]["name"] for o in applied[2:]}
    cluster = FakeCluster(applied + owned + [{"kind": "ConfigMap", "metadata": {
        "name": "users-own", "labels": {"team": "nlp"}}}])
    deleted = cluster.delete("unit-job", "ml")
    assert deleted == ["job.batch/unit-job", "service/unit-job",
                       *sorted(f"configmap/{n}" for n in mine)]
    left = {name for kind, name in cluster.objects if kind == "ConfigMap"}
    assert left == {"users-own"} | {o["metadata"]["name"] for o in owned[2:]}
    # Owned ones are the garbage collector's (foreground: they go before their job).
    other = FakeCluster(owned)
    assert other.delete("other", "ml") == ["job.batch/other", "service/other"]
    assert ("list", "configmaps", f"{L.JOB_NAME}=other") in other.calls


def test_delete_waits_for_configmaps_too(monkeypatch):
    watched: list[str] = []
    monkeypatch.setattr("kdist.kube.watch.reflector.wait_empty",
                        lambda source, timeout, **_: watched.append(source.kind.plural))
    wait_gone(FakeCluster([]), "unit-job", "ml", 5)
    assert "configmaps" in watched


def test_rbac_allows_exactly_what_the_client_does_with_configmaps():
    rules = [r for r in addons.RULES if "configmaps" in r["resources"]]
    assert rules == [{"apiGroups": [""], "resources": ["configmaps"],
                      "verbs": ["create", "list", "watch", "delete"]}]
    assert kinds.CONFIGMAP.plural == "configmaps"


@pytest.mark.parametrize("backend", BACKENDS)
def test_golden_case_renders_its_fixture(backend):
    job = with_backend(load_job(ROOT / "tests" / "unit" / "cases" / "workdir.yaml"), backend)
    code = pack_workdir(job)
    assert code is not None and code.files == 4 and code.warnings == ()  # run.log left out
    assert [o["kind"] for o in render(job, code)][-1] == "ConfigMap"
