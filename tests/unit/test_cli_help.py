"""Every verb's --help lists kubectl's global flags and ends with Examples; the flags parse
after the verb as before it."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from kdist.cli import main

VERBS = main.list_commands(click.Context(main))  # the lazily loaded cluster verbs too
GLOBALS = ("--kubeconfig", "--context", "-n, --namespace", "--request-timeout")


@pytest.mark.parametrize("verb", VERBS)
def test_help_lists_the_global_flags_and_ends_with_examples(verb):
    res = CliRunner().invoke(main, [verb, "--help"], terminal_width=100)
    assert res.exit_code == 0, res.output
    head, _, examples = res.output.partition("\nExamples:\n")
    assert examples, f"kdist {verb} --help has no Examples section:\n{res.output}"
    lines = [line.strip() for line in examples.splitlines() if line.strip()]
    assert lines and all(line.startswith(f"kdist {verb}") for line in lines), res.output
    section = head.partition("\nGlobal options")[2]
    for flag in GLOBALS:
        assert flag in section, f"{flag} not listed in kdist {verb} --help:\n{res.output}"


def test_render_takes_namespace_after_the_verb():
    from tests.unit.golden import ROOT

    res = CliRunner().invoke(main, ["render", str(ROOT / "examples" / "ddp-cpu.yaml"),
                                    "-n", "team-a"])
    assert res.exit_code == 0, res.output
    assert "namespace: team-a" in res.output


def test_after_the_verb_wins(tmp_path):
    """Given both before and after the verb, the one after is used (render shows it)."""
    from tests.unit.golden import ROOT

    res = CliRunner().invoke(main, ["-n", "dev", "render",
                                    str(ROOT / "examples" / "ddp-cpu.yaml"), "-n", "prod"])
    assert res.exit_code == 0, res.output
    assert "namespace: prod" in res.output and "namespace: dev" not in res.output
