"""`kdist run --local` keeps its state in `.kdist/<name>` and clears parts of it on every
run (#37). Where `.kdist`, `.kdist/<name>` or a directory it clears is a symlink, the
clearing would follow it and delete files outside the project: refused (exit 2, the
path named) before anything is deleted. No process is started here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from kdist.cli import main
from kdist.local import runner as local
from kdist.rendering.workdir import pack
from kdist.shared.errors import UsageError
from kdist.spec import validate_job
from tests.unit.helpers import spec_with, write_spec

NAME = "unit-job"
CHECKPOINT = {"path": "/checkpoints", "volume": {"emptyDir": {}}}
# Each state path that may be a link, and where under the link's target kdist would
# delete (or write) were it followed.
LINKS = [".kdist", f".kdist/{NAME}", f".kdist/{NAME}/code", f".kdist/{NAME}/workspace",
         f".kdist/{NAME}/checkpoints"]


def victim_tree(root: Path) -> dict[str, bytes]:
    """Files a link's target holds wherever a followed clean-up would reach them."""
    for sub in ("", "code", "workspace", "checkpoints", f"{NAME}/code", f"{NAME}/workspace",
                f"{NAME}/checkpoints/.tmp-old"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / "precious.txt").write_text(f"precious {sub}\n")
    return tree(root)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


def linked(project: Path, link: str) -> tuple[Path, dict[str, bytes]]:
    """`link` under `project` made a symlink to a directory outside it full of victims."""
    outside = project.parent / "outside"
    files = victim_tree(outside)
    path = project / link
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(outside, target_is_directory=True)
    return outside, files


def job_and_code(project: Path):
    (project / "src").mkdir()
    (project / "src" / "train.py").write_text("print('hi')\n")
    return validate_job(spec_with(**{"spec.checkpoint": CHECKPOINT})), pack(project / "src")


@pytest.mark.parametrize("link", LINKS)
def test_run_local_refuses_a_symlinked_state_dir_before_deleting(project, monkeypatch, link):
    outside, files = linked(project, link)
    job, code = job_and_code(project)
    monkeypatch.chdir(project)
    monkeypatch.setattr(local, "free_port", lambda port: port)
    monkeypatch.setattr(local, "run_nodes", lambda *a, **k: pytest.fail("nodes started"))
    with pytest.raises(UsageError) as e:
        local.run_local(job, code=code)
    assert str(e.value) == (f"{project / link} is a symlink; kdist keeps local runs' state "
                            "there and will not follow it (remove the link)")
    assert tree(outside) == files, "files outside the project were deleted"
    assert (project / link).is_symlink(), "the link itself is the user's to remove"


@pytest.mark.parametrize("link", LINKS)
def test_local_workspace_refuses_too(project, link):
    """`local_workspace` clears `.kdist/<name>/{code,workspace}` itself: it checks on its
    own, whoever calls it."""
    outside, files = linked(project, link)
    job, code = job_and_code(project)
    with pytest.raises(UsageError, match="is a symlink"):
        local.local_workspace(job, code, project)
    assert tree(outside) == files


def test_the_cli_says_it_in_one_line_and_exits_2(project):
    outside, files = linked(project, f".kdist/{NAME}")
    spec = write_spec(project, spec_with(**{"spec.checkpoint": CHECKPOINT}))
    old = Path.cwd()
    os.chdir(project)
    try:
        res = CliRunner().invoke(main, ["run", "--local", str(spec)])
    finally:
        os.chdir(old)
    assert res.exit_code == 2, res.output
    assert f"error: {project / '.kdist' / NAME} is a symlink" in res.output, res.output
    assert tree(outside) == files


def test_links_inside_the_workspace_go_without_being_followed(project):
    """A fresh workspace clears the last one; a link inside it (a user's, or a run's) is
    removed as a link."""
    outside = project.parent / "outside"
    files = victim_tree(outside)
    job, code = job_and_code(project)
    workspace = local.local_workspace(job, code, project)
    (workspace / "data").symlink_to(outside, target_is_directory=True)
    (workspace / "file").symlink_to(outside / "precious.txt")
    again = local.local_workspace(job, code, project)
    assert tree(outside) == files
    assert not (again / "data").exists() and not (again / "file").exists()
