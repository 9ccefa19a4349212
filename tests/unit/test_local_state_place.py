"""Where a local run's state sits (#39): `.kdist/<name>` beside the job file, wherever the
command is run from; with no job file (the built-in starter, a function's
`train(local=True)`) in the current directory. No process is started: the nodes'
start is where these tests look, and stop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kdist.cli import main
from kdist.local import runner as local
from kdist.shared import env as E
from tests.unit.helpers import spec_with, write_spec

NAME = "unit-job"
CHECKPOINT = {"path": "/checkpoints", "volume": {"emptyDir": {}}}


class Started(Exception):
    """The nodes would start here (what they were given is in `seen`)."""


@pytest.fixture
def seen(monkeypatch) -> dict[str, Any]:
    """Run a local job up to the nodes' start, torch or not: what they would get."""
    got: dict[str, Any] = {}

    def preflight(job: Any, root: Path) -> None:  # the state check only, not torch's
        local.state_dir(job.metadata.name, root)

    def run_nodes(argv: list[str], envs: list[dict[str, str]], **kwargs: Any) -> int:
        got.update(envs=envs, cwd=kwargs.get("cwd"))
        raise Started

    monkeypatch.setattr(local, "_preflight", preflight)
    monkeypatch.setattr(local, "free_port", lambda port: port)
    monkeypatch.setattr(local, "run_nodes", run_nodes)
    return got


def run(args: list[str], cwd: Path, monkeypatch) -> Any:
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, ["run", "--local", "--raw", *args])


def test_state_sits_beside_the_job_file_not_in_the_cwd(tmp_path, seen, monkeypatch):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "src").mkdir(parents=True)
    (project / "src" / "train.py").write_text("print('hi')\n")
    elsewhere.mkdir()
    spec = write_spec(project, spec_with(**{"spec.checkpoint": CHECKPOINT}))
    res = run([str(spec), "--workdir", str(project / "src")], elsewhere, monkeypatch)
    assert isinstance(res.exception, Started), res.output
    state = project / ".kdist" / NAME
    assert seen["envs"][0][E.CHECKPOINT_DIR] == str(state / "checkpoints")
    assert seen["cwd"] == state / "workspace"
    assert (state / "workspace" / "train.py").is_file()
    assert not (elsewhere / ".kdist").exists(), "a local run littered the current directory"


def test_a_relative_job_file_gives_absolute_paths_to_the_nodes(tmp_path, seen, monkeypatch):
    """The nodes run in the workspace: a relative checkpoint path would point elsewhere."""
    (tmp_path / "jobs").mkdir()
    write_spec(tmp_path / "jobs", spec_with(**{"spec.checkpoint": CHECKPOINT}))
    res = run(["jobs/job.yaml"], tmp_path, monkeypatch)
    assert isinstance(res.exception, Started), res.output
    ckpt = seen["envs"][0][E.CHECKPOINT_DIR]
    assert ckpt == str(tmp_path / "jobs" / ".kdist" / NAME / "checkpoints")


def test_a_symlinked_state_dir_beside_the_job_file_is_refused(tmp_path, seen, monkeypatch):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (elsewhere / ".kdist").symlink_to(tmp_path, target_is_directory=True)  # not used: fine
    (project / ".kdist").symlink_to(tmp_path, target_is_directory=True)
    spec = write_spec(project, spec_with(**{"spec.checkpoint": CHECKPOINT}))
    res = run([str(spec)], elsewhere, monkeypatch)
    assert res.exit_code == 2, res.output
    assert f"error: {project / '.kdist'} is a symlink" in res.output
    assert not seen, "the nodes started"


def test_the_built_in_starter_keeps_its_state_in_the_cwd(tmp_path, seen, monkeypatch):
    (tmp_path / ".kdist").symlink_to(tmp_path.parent, target_is_directory=True)
    res = run([], tmp_path, monkeypatch)
    assert res.exit_code == 2, res.output
    assert f"error: {tmp_path / '.kdist'} is a symlink" in res.output


def test_train_of_a_function_locally_keeps_its_state_in_the_cwd(tmp_path, seen, monkeypatch):
    import kdist
    from tests.unit import local_state_fn  # a function with a file: its directory travels

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".kdist").symlink_to(tmp_path.parent, target_is_directory=True)
    with pytest.raises(kdist.UsageError, match=f"{tmp_path / '.kdist'} is a symlink"):
        kdist.train(local_state_fn.fit, nodes=1, local=True, logs=False)
    assert not seen, "the nodes started"
