"""The CLI with a workdir: render prints the ConfigMaps, refusals exit 2 before anything."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import yaml
from click.testing import CliRunner

from kdist.cli import main
from kdist.shared import env as E
from tests.unit.helpers import spec_with, write_spec

CAP_MIB = 10


def run(*args: str, cwd: Path | None = None):
    old = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return CliRunner().invoke(main, list(args))
    finally:
        os.chdir(old)


def code_tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "train.py").write_text("print('from the workdir')\n")
    (root / "sub" / "util.py").write_text("X = 1\n")
    return root


def over_cap(root: Path) -> Path:
    root.mkdir()
    (root / "small.py").write_text("x = 1\n")
    # Incompressible: packs to just over the cap.
    (root / "big.bin").write_bytes(os.urandom(CAP_MIB * 2**20 + 2**16))
    return root


def objects(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_render_with_workdir_prints_the_configmaps(tmp_path):
    code_tree(tmp_path / "code")
    (tmp_path / "code" / "outside").symlink_to("/etc/hostname")
    spec = write_spec(tmp_path, spec_with())
    res = run("render", str(spec), "--workdir", "code", cwd=tmp_path)  # relative to the cwd
    assert res.exit_code == 0, res.output
    docs = objects(res.stdout)
    assert [d["kind"] for d in docs] == ["Job", "Service", "ConfigMap"]
    cm = docs[2]
    assert "ownerReferences" not in cm["metadata"]  # kubectl apply: `kdist delete` finds it
    env = {e["name"]: e.get("value") for e in
           docs[0]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert cm["metadata"]["annotations"]["kdist.dev/code-sha256"] == env[E.CODE_SHA256]
    assert res.stderr.splitlines() == [
        "warning: --workdir: outside: skipped, symlink to an absolute path (/etc/hostname); "
        "make it relative to ship it"]
    as_json = json.loads(run("render", str(spec), "--workdir", str(tmp_path / "code"),
                             "-o", "json").stdout)
    assert as_json["items"] == docs


def test_spec_workdir_is_read_relative_to_the_job_file(tmp_path):
    code_tree(tmp_path / "proj" / "code")
    spec = write_spec(tmp_path / "proj", spec_with(**{"spec.workdir": "code"}))
    res = run("render", str(spec), cwd=tmp_path)
    assert res.exit_code == 0, res.output
    assert [d["kind"] for d in objects(res.stdout)][-1] == "ConfigMap"


def test_validate_reports_a_workdir_that_cannot_be_shipped(tmp_path):
    good = write_spec(tmp_path, spec_with(), "good.yaml")
    missing = write_spec(tmp_path, spec_with(**{"spec.workdir": "nowhere"}), "missing.yaml")
    big = write_spec(tmp_path, spec_with(**{"spec.workdir": "big"}), "big.yaml")
    over_cap(tmp_path / "big")
    res = run("validate", str(good), str(missing), str(big))
    assert res.exit_code == 2
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert errors[0] == f"error: {missing}: spec.workdir: {tmp_path / 'nowhere'} does not exist"
    assert errors[1].startswith(f"error: {big}: spec.workdir: {tmp_path / 'big'} packs to ")
    assert f"over the {CAP_MIB}.0 MiB cap; biggest files: big.bin (10.1 MiB), small.py" \
        in errors[1]
    assert "bake the code into the image, or put it on a PVC" in errors[1]
    assert len(errors) == 2 and f"{good}: ok" in res.output


def test_submit_over_the_cap_is_refused_before_any_request(tmp_path):
    over_cap(tmp_path / "big")
    spec = write_spec(tmp_path, spec_with(**{"metadata.namespace": "ml"}))
    with socket.socket() as server:  # the "cluster": must not even be connected to
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {
                "server": f"http://127.0.0.1:{server.getsockname()[1]}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
        for extra in ([], ["--dry-run=server"], ["--replace"]):
            res = run("--kubeconfig", str(kubeconfig), "submit", str(spec), "--workdir",
                      str(tmp_path / "big"), "--no-wait", *extra)
            assert res.exit_code == 2, res.output
            errors = [line for line in res.output.splitlines() if line.startswith("error:")]
            assert len(errors) == 1 and errors[0].startswith("error: --workdir: "), res.output
            assert "over the 10.0 MiB cap" in errors[0]
            assert "created" not in res.output
        try:
            server.accept()
            connected = True
        except BlockingIOError:
            connected = False
        assert not connected


def test_submit_dry_run_client_prints_the_configmaps(tmp_path):
    code_tree(tmp_path / "code")
    spec = write_spec(tmp_path, spec_with(**{"spec.backend": "pytorchjob",
                                             "spec.workdir": "code"}))
    res = run("-n", "ml", "submit", str(spec), "--dry-run=client")
    assert res.exit_code == 0, res.output
    docs = objects(res.stdout)
    assert [d["kind"] for d in docs] == ["PyTorchJob", "ConfigMap"]
    assert {d["metadata"]["namespace"] for d in docs} == {"ml"}


def test_run_local_with_a_missing_workdir_exits_2(tmp_path):
    spec = write_spec(tmp_path, spec_with())
    res = run("run", "--local", str(spec), "--workdir", "gone", cwd=tmp_path)
    assert res.exit_code == 2
    assert "error: --workdir: gone does not exist" in res.output
    assert not (tmp_path / ".kdist").exists()
