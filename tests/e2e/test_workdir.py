"""spec.workdir / --workdir on a real cluster: code that is not in the image runs.

Every backend, as the least-privilege ServiceAccount of manifests/rbac.yaml: a
script that exists only in the workdir runs from /workspace; edited and
resubmitted with --replace, the new version runs; `status` names the code's
hash; `delete` leaves no ConfigMap. A workdir over the cap creates nothing.
`kubectl apply` of `kdist render --workdir` works the same (full-size chunks
fit client-side apply's annotation), and `kdist delete` removes those
ConfigMaps, which nothing owns. Pods that start before their ConfigMaps exist
wait for them (the kubelet retries the mount).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from kdist import backends
from kdist.rendering import addons, render
from kdist.rendering.code_configmaps import CHUNK_BYTES
from kdist.rendering.workdir import pack
from kdist.shared import labels as L
from kdist.spec import validate_job

from .conftest import Kube, kdist_container
from .conftest_cli import (  # noqa: F401 - the fixtures register by being imported
    job_file_fixture,
    job_spec,
    kdist_fixture,
    kubectl,
    leftovers,
    training_resources,
)
from .test_rbac import install_rbac, kubeconfig_for
from .test_training import create, wait_job

BACKENDS = list(backends.NAMES)
pytestmark = pytest.mark.timeout(600)

# Only in the workdir: imports a module shipped beside it, reads a data file by a
# relative path, and says which version ran where.
SCRIPT = """\
import json, os
from helpers.version import VERSION
with open("data/note.txt") as f:
    note = f.read().strip()
print(json.dumps({"event": "code", "rank": int(os.environ["RANK"]), "version": VERSION,
                  "note": note, "cwd": os.getcwd()}), flush=True)
"""
WORKLOAD = {"command": ["python", "hello.py"]}


def write_code(root: Path, version: str, blob: int = 0) -> Path:
    (root / "helpers").mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / "hello.py").write_text(SCRIPT)
    (root / "helpers" / "__init__.py").write_text("")
    (root / "helpers" / "version.py").write_text(f"VERSION = {version!r}\n")
    (root / "data" / "note.txt").write_text(f"note of {version}\n")
    if blob:  # incompressible, so the archive takes that many bytes of ConfigMaps
        (root / "data" / "blob.bin").write_bytes(os.urandom(blob))
    return root


def code_lines(text: str) -> dict[int, dict[str, Any]]:
    """The script's line of each rank in `kdist logs` output (`[rank N] {...}`)."""
    out = {}
    for line in text.splitlines():
        _, _, body = line.partition("] ")
        if body.startswith('{"event": "code"'):
            record = json.loads(body)
            out[record["rank"]] = record
    return out


def code_configmaps(namespace: str, name: str) -> list[str]:
    return kubectl("-n", namespace, "get", "configmaps", "-l", f"{L.JOB_NAME}={name}",
                   "-o", "name").stdout.split()


def assert_ran(logs: str, version: str, needed: set[int]) -> None:
    lines = code_lines(logs)
    assert needed <= set(lines), logs
    for record in lines.values():
        assert record["version"] == version and record["note"] == f"note of {version}", logs
        assert record["cwd"] == "/workspace", logs


@pytest.mark.parametrize("backend", BACKENDS)
def test_workdir_runs_is_replaced_and_deleted(backend, kube, namespace, kdist, job_file,
                                              tmp_path):
    install_rbac(kube, namespace)
    cfg = kubeconfig_for(addons.SERVICE_ACCOUNT, namespace, tmp_path / "sa.kubeconfig")
    code = write_code(tmp_path / "code", "v1")
    path = job_file("shipped", backend=backend, workload=WORKLOAD, workdir="code")

    first = kdist("--kubeconfig", cfg, "submit", path, "--timeout", "300")
    assert first.returncode == 0, first.stderr
    sha1 = pack(code).sha256
    assert f"configmap/shipped-code-{sha1[:10]}-0 created in namespace {namespace}" \
        in first.stdout
    # A PyTorchJob may be over (and its worker stopped) before rank 1's line is read.
    ranks = {0} if backend == "pytorchjob" else {0, 1}
    assert_ran(kdist("--kubeconfig", cfg, "logs", "shipped").stdout, "v1", ranks)
    status = kdist("--kubeconfig", cfg, "status", "shipped", "-o", "json")
    assert json.loads(status.stdout)["code"] == sha1
    assert f"code {sha1[:12]}" in kdist("--kubeconfig", cfg, "status", "shipped").stdout

    write_code(code, "v2")
    second = kdist("--kubeconfig", cfg, "submit", path, "--replace", "--timeout", "300")
    assert second.returncode == 0, second.stderr
    sha2 = pack(code).sha256
    assert sha2 != sha1
    logs = kdist("--kubeconfig", cfg, "logs", "shipped").stdout
    assert_ran(logs, "v2", ranks)
    assert "v1" not in logs
    status = kdist("--kubeconfig", cfg, "status", "shipped", "-o", "json")
    assert json.loads(status.stdout)["code"] == sha2
    assert code_configmaps(namespace, "shipped") == [f"configmap/shipped-code-{sha2[:10]}-0"]

    deleted = kdist("--kubeconfig", cfg, "delete", "shipped")
    assert deleted.returncode == 0, deleted.stderr
    assert code_configmaps(namespace, "shipped") == []
    assert leftovers(namespace, "shipped") == []


def test_a_workdir_over_the_cap_creates_nothing(namespace, kdist, job_file, tmp_path):
    big = tmp_path / "code"
    big.mkdir()
    (big / "train.py").write_text("print('never')\n")
    (big / "dataset.bin").write_bytes(os.urandom(11 * 2**20))
    path = job_file("toobig", workload=WORKLOAD, workdir="code")
    for extra in ([], ["--replace"], ["--dry-run=server"]):
        res = kdist("submit", path, "--no-wait", *extra)
        assert res.returncode == 2, res.stderr
        errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: spec.workdir: "), res.stderr
        assert "over the 10.0 MiB cap; biggest files: dataset.bin (11.0 MiB)" in errors[0]
    everything = kubectl("-n", namespace, "get",
                         f"{training_resources()},services,pods,configmaps",
                         "-o", "name").stdout.split()
    # Every namespace gets its cluster CA bundle from the controller-manager.
    assert [o for o in everything if o != "configmap/kube-root-ca.crt"] == []


def test_kubectl_apply_of_the_rendered_code_and_kdist_delete(namespace, kdist, job_file,
                                                             tmp_path):
    # Three parts: two at the full chunk size, which client-side apply copies into its
    # last-applied annotation (256 KiB for all annotations).
    code = write_code(tmp_path / "code", "applied", blob=2 * CHUNK_BYTES + 1000)
    path = job_file("applied", workload=WORKLOAD, nodes=1)
    rendered = kdist("render", path, "--workdir", code)
    assert rendered.returncode == 0, rendered.stderr
    kubectl("-n", namespace, "apply", "-f", "-", stdin=rendered.stdout)
    parts = code_configmaps(namespace, "applied")
    assert len(parts) == 3, parts
    followed = kdist("logs", "-f", "applied")
    assert followed.returncode == 0, followed.stderr
    assert_ran(followed.stdout, "applied", {0})
    deleted = kdist("delete", "applied")
    assert deleted.returncode == 0, deleted.stderr
    for part in parts:
        assert part in deleted.stdout
    assert code_configmaps(namespace, "applied") == []
    assert leftovers(namespace, "applied") == []


def test_pods_that_start_before_their_code_wait_for_it(kube: Kube, namespace, tmp_path):
    """`submit` creates the job first (it owns the ConfigMaps, so it needs the job's uid):
    its pods may be scheduled before the ConfigMaps exist. The kubelet retries the mount."""
    code = pack(write_code(tmp_path / "code", "late"))
    doc = job_spec("early", nodes=1, workload=WORKLOAD)
    doc["metadata"]["namespace"] = namespace
    objects = render(validate_job(doc), code)
    training, configmaps = objects[:2], objects[2:]
    create(kube, namespace, training)
    deadline = time.monotonic() + 120
    pod = None
    while time.monotonic() < deadline:
        pods = kube.core.list_namespaced_pod(namespace,
                                             label_selector=L.selector_string("early")).items
        if pods and pods[0].spec.node_name:
            pod = pods[0]
            break
        time.sleep(1)
    assert pod is not None, "no pod was scheduled"
    time.sleep(5)  # the kubelet tries, and fails, to mount the missing ConfigMaps
    assert kube.core.read_namespaced_pod(pod.metadata.name, namespace).status.phase == "Pending"
    create(kube, namespace, configmaps)
    assert wait_job(kube, namespace, "early", "indexed-job") == "succeeded"
    log = kube.pod_log(namespace, pod.metadata.name, kdist_container(namespace, pod))
    assert '"version": "late"' in log, log
    events = kube.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pod.metadata.name}").items
    print("pod events:", [(e.reason, (e.message or "")[:120]) for e in events])
