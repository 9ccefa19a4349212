"""README.md and docs/*.md hold together: every relative link reaches a file or heading
that exists, every Python block is run by a test or at least compiles, every `kdist`
command of the README parses, and the layout table names every module."""

from __future__ import annotations

import re
import shlex
import warnings
from pathlib import Path

import click
import pytest

from kdist.cli import main
from tests.readme_blocks import FRAGMENTS, README, ROOT, RUN, markdown_files, python_blocks

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _prose(text: str) -> str:
    """The text without fenced blocks and code spans (links are not made there)."""
    text = re.sub(r"^```.*?^```$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "``", text)


def anchors(path: Path) -> set[str]:
    """GitHub's heading anchors of a markdown file (lower case, punctuation dropped,
    spaces as '-', repeats numbered) and explicit <a id> / <a name> targets."""
    text = re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.S | re.M)
    seen: dict[str, int] = {}
    found = set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", text))
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, flags=re.M):
        plain = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
        slug = re.sub(r"[^\w\- ]", "", plain).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def broken_links(path: Path) -> list[str]:
    bad = []
    for target in LINK.findall(_prose(path.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not ours to check
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            bad.append(f"{target}: no such heading")
    return bad


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_or_heading(path):
    assert broken_links(path) == []


def test_the_link_check_catches_a_broken_file_and_heading(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Top\n\n## The `spec.pod` field\n\n[ok](#the-specpod-field) [ok](#top)\n"
                    "[gone](missing.md) [nohead](#nowhere) [web](https://example.com)\n"
                    "`[in code](missing2.md)`\n```\n[in a block](missing3.md)\n```\n")
    assert broken_links(page) == ["missing.md: no such file", "#nowhere: no such heading"]


def test_every_python_block_is_run_by_a_test_or_compiles_as_a_fragment():
    for path, code in python_blocks():
        claimed = [m for m in (*RUN, *FRAGMENTS) if m in code]
        assert len(claimed) == 1, f"{path.name}: a python block no test claims:\n{code[:200]}"
        compile(code, str(path), "exec")
    for marker in (*RUN, *FRAGMENTS):
        assert sum(marker in code for _, code in python_blocks()) == 1, marker


def readme_commands() -> list[str]:
    """Every `kdist ...` line of the README's sh blocks, comments cut."""
    blocks = re.findall(r"^```sh\n(.*?)^```$", README.read_text(), re.S | re.M)
    lines = [line.split(" #")[0].strip() for b in blocks for line in b.splitlines()]
    return [line for line in lines if line.startswith("kdist ")]


@pytest.mark.parametrize("line", readme_commands())
def test_every_readme_command_parses(line):
    args = shlex.split(line)[1:]
    ctx = main.make_context("kdist", args)
    with warnings.catch_warnings():  # click 8.2 deprecates protected_args; 9 folds it into args
        warnings.simplefilter("ignore", DeprecationWarning)
        left = [*ctx.protected_args, *ctx.args]
    name, command, rest = main.resolve_command(ctx, left)
    assert isinstance(command, click.Command), line
    command.make_context(name, rest, parent=ctx)  # an unknown flag raises UsageError


def test_the_layout_table_names_every_module():
    table = (ROOT / "docs" / "testing.md").read_text().split("## Layout", 1)[1]
    missing = []
    for path in sorted((ROOT / "kdist").rglob("*")):
        if path.suffix not in (".py", ".yaml", ".json") or path.name in (
                "__init__.py", "__main__.py") or "__pycache__" in path.parts:
            continue
        named = (f"`{path.name}`", f"`{path.relative_to(ROOT)}`", f"`{path.parent.name}/`")
        if not any(name in table for name in named):
            missing.append(str(path.relative_to(ROOT)))
    assert missing == []
