"""docs/reference.md and the JSON Schema of job.yaml come from the spec model, are
committed fresh (as manifests/ is), and the schema agrees with `kdist validate`."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from kdist.cli import main
from kdist.spec import docsgen
from kdist.spec.schema import job_schema
from tests.unit.golden import ROOT

VALIDATOR = jsonschema.Draft7Validator(job_schema())


def test_committed_reference_and_schema_are_fresh():
    assert docsgen.stale() == [], "run `make docs`"
    assert docsgen.main(["--check"]) == 0


def test_the_check_catches_a_stale_file(tmp_path, monkeypatch):
    stale = tmp_path / "reference.md"
    stale.write_text(docsgen.reference_text().replace("Pods.", "Pods!"))
    monkeypatch.setattr(docsgen, "REFERENCE", stale)
    monkeypatch.setattr(docsgen, "ROOT", tmp_path)
    assert docsgen.stale() == ["reference.md"]
    assert docsgen.main(["--check"]) == 1


def test_generation_is_deterministic_and_imports_no_torch():
    code = ("import sys, hashlib; from kdist.spec import docsgen\n"
            "text = ''.join(docsgen.expected().values())\n"
            "print(hashlib.sha256(text.encode()).hexdigest(), 'torch' in sys.modules)")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           cwd=ROOT, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2")}
    assert len(outs) == 1 and outs.pop().split()[1] == "False"


def test_the_schema_is_valid_and_ships_as_package_data():
    jsonschema.Draft7Validator.check_schema(job_schema())
    assert "job.schema.json" in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")) +
                         [ROOT / "kdist" / "cli" / "starter.yaml"], ids=lambda p: p.name)
def test_every_example_passes_the_schema(path):
    errors = [e.message for e in VALIDATOR.iter_errors(yaml.safe_load(path.read_text()))]
    assert errors == []


def _starter() -> dict:
    return yaml.safe_load((ROOT / "kdist" / "cli" / "starter.yaml").read_text())


def test_the_schema_refuses_what_validate_refuses():
    for edit in (lambda d: d["spec"].update(chekpoint={}),        # unknown field
                 lambda d: d["spec"].update(backend="slurm"),     # not one of
                 lambda d: d["spec"].update(nodes=0),             # out of range
                 lambda d: d["spec"].update(procsPerNode="all"),  # int or "auto" only
                 lambda d: d["spec"].pop("image")):               # required
        doc = copy.deepcopy(_starter())
        edit(doc)
        assert not VALIDATOR.is_valid(doc), doc["spec"]


def test_the_schema_takes_numbers_where_kdist_reads_their_text():
    doc = _starter()
    doc["spec"]["workload"]["args"] = ["--max-steps", 200]
    doc["spec"]["resources"].update(cpu=2, extended={"rdma/hca": 1})
    doc["spec"]["procsPerNode"] = "auto"
    assert list(VALIDATOR.iter_errors(doc)) == []


def _modeline_target(job: Path) -> Path:
    first = job.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema="), first
    target = first.split("=", 1)[1]
    assert not os.path.isabs(target) and "site-packages" not in target, first
    return job.parent / target


def test_init_points_editors_at_a_schema_beside_the_job_file(tmp_path):
    job = tmp_path / "job.yaml"
    res = CliRunner().invoke(main, ["init", str(job)])
    assert res.exit_code == 0 and "kdist schema >" in res.output, res.output
    assert _modeline_target(job) == tmp_path / "./job.schema.json"
    printed = CliRunner().invoke(main, ["init", "-"]).output
    assert printed.splitlines()[0] == "# yaml-language-server: $schema=./job.schema.json"


def test_kdist_schema_prints_the_schema_the_modeline_wants(tmp_path):
    res = CliRunner().invoke(main, ["schema"])
    assert res.exit_code == 0
    assert json.loads(res.output) == job_schema()
    assert res.output == (ROOT / "kdist" / "spec" / "job.schema.json").read_text()


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_example_points_at_the_committed_schema(example):
    assert _modeline_target(example).resolve() == ROOT / "kdist" / "spec" / "job.schema.json"


@pytest.mark.parametrize(("path", "value"), [
    (("metadata", "name"), "Bad_Name"), (("metadata", "name"), "a" * 51),
    (("metadata", "name"), "1abc"), (("metadata", "namespace"), "Team A"),
    (("spec", "resources", "memory"), "4GB"), (("spec", "resources", "cpu"), "two"),
    (("spec", "resources", "shm"), "-1Gi")])
def test_the_schema_flags_a_bad_name_or_quantity_as_validate_does(path, value):
    doc = _starter()
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert list(VALIDATOR.iter_errors(doc)), f"{'.'.join(path)}: {value!r} passed the schema"
    from kdist.shared.errors import SpecError
    from kdist.spec import validate_job

    with pytest.raises(SpecError):
        validate_job(doc)
