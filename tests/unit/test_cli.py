"""The CLI surface: exit codes, one-line errors, render output, init."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml
from click.testing import CliRunner

from kdist.cli import main
from kdist.spec import load_job
from tests.unit.golden import ROOT
from tests.unit.helpers import spec_with, write_spec

EXAMPLE = str(ROOT / "examples" / "ddp-cpu.yaml")


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_help_lists_every_verb():
    out = run("--help").output
    for verb in ("validate", "render", "init", "run"):
        assert verb in out


def test_validate_ok_and_bad(tmp_path):
    good = run("validate", EXAMPLE)
    assert good.exit_code == 0 and "ok (indexed-job" in good.output
    bad = write_spec(tmp_path, spec_with(**{"spec.nodes": -3, "metadata.name": "X"}))
    res = run("validate", EXAMPLE, str(bad))
    assert res.exit_code == 2
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert f"error: {bad}: spec.nodes: must be >= 1, got -3" in errors
    assert any(f"{bad}: metadata.name:" in e for e in errors)
    assert "Traceback" not in res.output


def test_render_yaml_and_json_agree():
    as_yaml = list(yaml.safe_load_all(run("render", EXAMPLE).output))
    as_json = json.loads(run("render", EXAMPLE, "-o", "json").output)
    assert as_json["kind"] == "List" and as_json["items"] == as_yaml
    assert [o["kind"] for o in as_yaml] == ["Job", "Service"]


def test_render_backend_override():
    objs = list(yaml.safe_load_all(run("render", EXAMPLE, "--backend", "pytorchjob").output))
    assert [o["kind"] for o in objs] == ["PyTorchJob"]


def test_render_namespace_flag(tmp_path):
    objs = list(yaml.safe_load_all(run("-n", "team-a", "render", EXAMPLE).output))
    assert {o["metadata"]["namespace"] for o in objs} == {"team-a"}
    pinned = write_spec(tmp_path, spec_with(**{"metadata.namespace": "prod"}))
    res = run("-n", "dev", "render", str(pinned))
    assert res.exit_code == 2 and "metadata.namespace is 'prod' but -n says 'dev'" in res.output


def test_render_missing_file_exit_2(tmp_path):
    res = run("render", str(tmp_path / "nope.yaml"))
    assert res.exit_code == 2 and "cannot read" in res.output


def test_bad_flag_exit_2():
    assert run("render", EXAMPLE, "-o", "xml").exit_code == 2


def test_init_writes_a_valid_starter(tmp_path):
    target = tmp_path / "job.yaml"
    res = run("init", str(target))
    assert res.exit_code == 0 and target.is_file()
    assert load_job(target).spec.workload.module == "kdist.workloads.ddp"
    again = run("init", str(target))
    assert again.exit_code == 2 and "already exists" in again.output
    assert run("init", str(target), "--force").exit_code == 0


def test_run_needs_local():
    res = run("run", EXAMPLE)
    assert res.exit_code == 2 and "--local" in res.output


def test_python_dash_m_works():
    res = subprocess.run([sys.executable, "-m", "kdist", "validate", EXAMPLE],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


def test_restarts_that_cannot_resume_or_be_bounded_are_warned_about(tmp_path):
    """Valid, so exit 0, but said: emptyDir checkpoints with restarts, an unbounded PyTorchJob."""
    risky = write_spec(tmp_path, spec_with(**{
        "spec.backend": "pytorchjob", "spec.distributed": {"maxRestarts": 2},
        "spec.checkpoint": {"path": "/ckpt", "volume": {"emptyDir": {}}}}))
    res = CliRunner().invoke(main, ["validate", str(risky)])
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, res.output
    assert f"warning: {risky}: spec.checkpoint.volume: an emptyDir" in warnings[0]
    assert "spec.activeDeadlineSeconds" in warnings[1]
    rendered = CliRunner().invoke(main, ["render", str(risky)])
    assert rendered.exit_code == 0 and "warning:" in rendered.output
    safe = write_spec(tmp_path, spec_with(**{
        "spec.distributed": {"maxRestarts": 2},
        "spec.checkpoint": {"path": "/ckpt",
                            "volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}}}))
    assert "warning:" not in CliRunner().invoke(main, ["validate", str(safe)]).output
