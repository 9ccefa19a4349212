"""The unasked warm first start: which scripts get it (``kdist.runtime.warmstart``), the
spec's switch (``distributed.warmStart``), and the room a standby leaves for its worker's
command line."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kdist.rendering.contract import env_contract
from kdist.runtime import standby
from kdist.runtime import warmstart as W
from kdist.runtime.sitehook import _kdist_standby as entry
from kdist.shared import env as E
from kdist.spec import validate_job
from tests.unit.helpers import spec_with

PY = sys.executable


@pytest.mark.parametrize(("source", "expected"), [
    ("import torch\nprint(1)\n", True),
    ("import os, sys\nfrom torch import nn\n", True),
    ("import lightning as L\n", True),
    ("from accelerate import Accelerator\n", True),
    ("def main():\n    import torch\n", True),  # imported where it runs: the import is paid
    ("import numpy\nprint('no torch')\n", False),
    ("import torchvision_like_name\n", False),  # another package, not torch
    ("# import torch\nprint(1)\n", False),
    # torch would read what the script sets first: it must import torch itself
    ("import os\nos.environ['OMP_NUM_THREADS'] = '4'\nimport torch\n", False),
    ("import os\nos.putenv('X', '1')\nimport torch\n", False),
    ("import torch\nimport os\nos.environ['X'] = '1'\n", True),  # after torch: as cold
])
def test_a_script_starts_warm_unasked_only_when_it_imports_torch_first(source, expected):
    assert W.uses_torch_first(source) is expected


def test_the_command_decides_where_the_script_is_read(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("import torch\n")
    (tmp_path / "plain.py").write_text("print(1)\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("raise SystemExit('never imported')\n")
    (tmp_path / "pkg" / "fit.py").write_text("import torch\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text("import torch\n")
    cwd, env = str(tmp_path), {}
    assert W.first_start([PY, "-u", "train.py", "--lr", "1"], env, cwd)
    assert not W.first_start([PY, "-u", "plain.py"], env, cwd)
    assert not W.first_start([PY, "-u", "missing.py"], env, cwd)  # cold, as Python will say
    assert W.first_start([PY, "-u", "-m", "pkg.fit"], env, cwd)
    assert W.first_start([PY, "-u", "-m", "app"], env, cwd)
    assert not W.first_start([PY, "-u", "-m", "nowhere.to.be.found"], env, cwd)
    assert W.first_start([PY, "-u", "-m", "kdist.workloads.ddp"], env, "/")  # kdist's own
    assert W.first_start([PY, "-u", "-c", "import torch"], env, cwd)
    assert not W.first_start(["bash", "run.sh"], env, cwd)  # not a command a standby runs
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "mod.py").write_text("import torch\n")
    assert not W.first_start([PY, "-u", "-m", "mod"], env, cwd)
    assert W.first_start([PY, "-u", "-m", "mod"], {"PYTHONPATH": str(other)}, cwd)
    assert "pkg" not in sys.modules


def test_warm_start_is_off_by_default_and_asked_renders_a_first_start_from_standbys():
    def env(**distributed: object) -> dict[str, str]:
        changes = {f"spec.distributed.{k}": v for k, v in distributed.items()}
        job = validate_job(spec_with(**changes))
        return env_contract(job, node_rank=0, master_addr="m")

    assert E.WARM_WORKERS not in env()
    assert E.WARM_WORKERS not in env(warmStart=False)
    assert env(warmStart=True)[E.WARM_WORKERS] == "first"
    assert env(warmWorkers=True)[E.WARM_WORKERS] == "1"
    assert env(warmWorkers=True, warmStart=True)[E.WARM_WORKERS] == "1"
    assert standby.first_asked({E.WARM_WORKERS: "first"})
    assert not any(standby.first_asked(e) for e in ({}, {E.WARM_WORKERS: "0"},
                                                    {E.WARM_WORKERS: "1"}))


@pytest.mark.parametrize("worker", [
    [PY, "-u", "-m", "kdist.workloads.ddp", "--max-steps", "100", "--batch-size", "16"],
    [PY, "-u", "-c", "x" * 5000, "a"],
])
def test_a_standbys_command_line_is_as_long_as_its_workers(worker):
    standby = [PY, *entry.ARGV, entry.argv_room(worker)]
    assert len(b"\0".join(map(os.fsencode, standby))) == len(b"\0".join(map(os.fsencode, worker)))


def test_a_short_command_line_fits_a_standbys_with_room_to_spare():
    worker = [PY, "-u", "t.py"]
    assert entry.argv_room(worker) == ""
    standby = [PY, *entry.ARGV, ""]
    assert sum(len(a) + 1 for a in standby) > sum(len(a) + 1 for a in worker)


def test_no_room_refuses_a_worker_whose_blocks_do_not_fit(monkeypatch):
    monkeypatch.setattr(entry, "_regions", lambda: (1000, 1010, 2000, 2100))
    assert entry.no_room({"argv": ["p", "-u"], "env": {"A": "1"}}) == ""
    assert "command line" in entry.no_room({"argv": ["p" * 20], "env": {}})
    assert "environment" in entry.no_room({"argv": ["p"], "env": {"A": "x" * 200}})
    monkeypatch.setattr(entry, "_regions", lambda: None)  # the kernel does not say: no check
    assert entry.no_room({"argv": ["p" * 20], "env": {}}) == ""


def test_a_path_on_the_launchers_sys_path_is_searched_too(tmp_path, monkeypatch):
    (tmp_path / "onpath.py").write_text("import torch\n")
    monkeypatch.setattr(sys, "path", ["", str(tmp_path)])
    assert W.first_start([PY, "-u", "-m", "onpath"], {}, str(Path("/")))
