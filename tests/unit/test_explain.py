"""`kdist explain FIELD`: a field's doc, type, default and subfields from the spec model;
an unknown field is exit 2 with the closest one; no torch, no cluster."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from kdist.cli import main
from kdist.spec.schema import explain, tree
from tests.unit.golden import ROOT


def run(*args: str):
    return CliRunner().invoke(main, ["explain", *args])


def test_a_field_shows_its_doc_type_and_subfields_one_line_each():
    res = run("spec.checkpoint")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "FIELD:    spec.checkpoint <Object>" in lines
    assert any("KDIST_CHECKPOINT_DIR" in line for line in lines)
    fields = lines[lines.index("FIELDS:") + 1:]
    assert [line.split()[0] for line in fields] == ["path", "volume"]
    assert all("-required-" in line for line in fields)


def test_a_leaf_shows_its_default_and_range():
    res = run("spec.distributed.port")
    assert res.exit_code == 0, res.output
    assert "DEFAULT:  29500" in res.output and "VALUES:   1024 to 65535" in res.output
    assert "FIELDS:" not in res.output
    enum = run("spec.backend").output
    assert 'DEFAULT:  "indexed-job"' in enum and "one of: indexed-job, pytorchjob" in enum


def test_list_items_are_walked_without_an_index():
    res = run("spec.scheduling.tolerations.key")
    assert res.exit_code == 0 and "<string>" in res.output
    assert "<[]Object>" in run("spec.scheduling.tolerations").output


def test_no_field_is_the_whole_job_and_recursive_lists_everything():
    top = run()
    assert top.exit_code == 0 and "FIELD:    TrainingJob <Object>" in top.output
    assert run("trainingjob.spec.image").output == run("spec.image").output
    deep = run("spec", "--recursive").output
    assert "    port " in deep and "claimName" in deep


def test_an_unknown_field_is_exit_2_with_did_you_mean():
    res = run("spec.chekpoint")
    assert res.exit_code == 2
    assert res.output.strip() == \
        "error: spec.chekpoint: no such field; did you mean spec.checkpoint?"
    snake = run("spec.procs_per_node")
    assert snake.exit_code == 2 and "did you mean spec.procsPerNode?" in snake.output
    far = run("spec.zzz")
    assert far.exit_code == 2 and "spec has: backend, image," in far.output
    leaf = run("spec.image.tag")
    assert leaf.exit_code == 2 and "spec.image is string, it has no fields" in leaf.output


def test_every_field_kdist_defines_has_a_description():
    # Kubernetes-shaped types (affinity, volume sources) say so once, at their type.
    missing = []

    def walk(node, kubernetes: bool):
        for f in node.fields:
            if not kubernetes and not f.description:
                missing.append(f.path)
            walk(f, kubernetes or "as kubernetes" in f.type_doc.lower())

    walk(tree(), False)
    assert missing == []


def test_explain_matches_the_model():
    assert explain("spec.nodes").default == 1
    assert explain("spec.image").required
    assert not explain("spec.checkpoint").has_default or explain("spec.checkpoint").default is None


def test_explain_imports_no_torch():
    code = ("import sys; from kdist.cli import main\n"
            "try: main(['explain', 'spec.checkpoint'])\n"
            "except SystemExit: pass\n"
            "import json; print(json.dumps('torch' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) is False
