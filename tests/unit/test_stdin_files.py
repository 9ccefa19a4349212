"""`-` is standard input for validate, render and submit (as kubectl's `-f -`); a file with
several YAML documents says "one TrainingJob per file", exit 2."""

from __future__ import annotations

import yaml
from click.testing import CliRunner

from kdist.cli import main
from tests.unit.golden import ROOT

EXAMPLE = ROOT / "examples" / "ddp-cpu.yaml"


def run(*args: str, stdin: str | None = None):
    return CliRunner().invoke(main, list(args), input=stdin)


def test_validate_reads_standard_input() -> None:
    res = run("validate", "-", stdin=EXAMPLE.read_text())
    assert res.exit_code == 0, res.output
    assert "<stdin>: ok (indexed-job" in res.output


def test_render_reads_standard_input_as_the_file_would() -> None:
    res = run("render", "-", stdin=EXAMPLE.read_text())
    assert res.exit_code == 0, res.output
    assert res.output == run("render", str(EXAMPLE)).output
    assert [o["kind"] for o in yaml.safe_load_all(res.output)] == ["Job", "Service"]


def test_submit_client_dry_run_reads_standard_input(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)  # a client dry run needs no cluster
    monkeypatch.setenv("HOME", str(tmp_path))
    res = run("submit", "--dry-run=client", "-n", "team-a", "-", stdin=EXAMPLE.read_text())
    assert res.exit_code == 0, res.output
    objs = list(yaml.safe_load_all(res.output.split("---", 1)[1]))
    assert objs[0]["kind"] == "Job" and objs[0]["metadata"]["namespace"] == "team-a"


def test_submit_refuses_standard_input_twice() -> None:
    res = run("submit", "-", "-", stdin=EXAMPLE.read_text())
    assert res.exit_code == 2 and "standard input" in res.output


def test_a_spec_problem_on_standard_input_names_it() -> None:
    text = EXAMPLE.read_text().replace("nodes: 2", "nodes: -3")
    res = run("validate", "-", stdin=text)
    assert res.exit_code == 2 and "error: <stdin>: spec.nodes: must be >= 1" in res.output


def test_several_documents_are_one_line_naming_the_count(tmp_path) -> None:
    two = tmp_path / "two.yaml"
    two.write_text(EXAMPLE.read_text() + "---\n" + EXAMPLE.read_text())
    for verb in ("validate", "render"):
        res = run(verb, str(two))
        assert res.exit_code == 2, res.output
        assert f"error: {two}: one TrainingJob per file (found 2 documents)" in res.output
        assert "invalid YAML" not in res.output
    res = run("validate", "-", stdin=EXAMPLE.read_text() + "---\na: 1\n---\nb: 2\n")
    assert res.exit_code == 2 and "<stdin>: one TrainingJob per file (found 3 documents)" \
        in res.output
