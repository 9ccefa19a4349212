"""A launcher inside the workload (torchrun, python -m torch.distributed.run, accelerate
launch, deepspeed) would start a world of its own in every process kdist starts: N
separate models that all succeed. validate refuses it (exit 2), naming the field and
the spec lines that say the same to kdist."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kdist.cli import main
from kdist.spec.launchers import launcher_problem
from tests.unit.helpers import spec_with, write_spec


def test_torchrun_in_command_is_refused_with_the_lines_to_write(tmp_path):
    path = write_spec(tmp_path, spec_with(**{
        "spec.procsPerNode": 2,
        "spec.workload": {"command": ["torchrun", "--nproc-per-node", "2", "train.py",
                                      "--epochs", "3"]}}))
    res = CliRunner().invoke(main, ["validate", str(path)])
    assert res.exit_code == 2, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: {path}: spec.workload.command[0]: torchrun would start 4 separate worlds "
        "(one per process kdist starts), so 4 separate models; kdist is the launcher here: "
        "write spec.workload: {command: [python, train.py, --epochs, 3]}, spec.nodes: 2, "
        "spec.procsPerNode: 2"]


def test_the_local_run_refuses_it_too(tmp_path):
    path = write_spec(tmp_path, spec_with(**{
        "spec.workload": {"command": ["python", "-m", "torch.distributed.run", "train.py"]}}))
    res = CliRunner().invoke(main, ["run", "--local", str(path)])
    assert res.exit_code == 2, res.output
    assert "spec.workload.command[0]: python -m torch.distributed.run (torchrun)" in res.output


@pytest.mark.parametrize("module,command,args,field,run", [
    (None, ["/usr/bin/torchrun", "--nnodes=3", "--nproc_per_node=gpu", "t.py"], [],
     "command[0]", "{command: [python, t.py]}, spec.nodes: 3, spec.procsPerNode: auto"),
    (None, ["python3.11", "-u", "-m", "torch.distributed.run", "--standalone", "t.py"], [],
     "command[0]", "{command: [python, t.py]}"),
    (None, ["python3", "-mtorch.distributed.launch", "t.py"], [], "command[0]", "t.py"),
    ("torch.distributed.run", None, ["--nproc-per-node", "4", "t.py", "--lr", "0.1"],
     "module", "{command: [python, t.py, --lr, 0.1]}, spec.nodes: 2, spec.procsPerNode: 4"),
    (None, ["torchrun"], ["-m", "--nproc-per-node", "2", "pkg.train", "x"], "command[0]",
     "{module: pkg.train, args: [x]}"),
    (None, ["accelerate", "launch", "--multi_gpu", "t.py"], [], "command[0]", "t.py"),
    (None, ["deepspeed", "--num_gpus", "8", "t.py"], [], "command[0]",
     "spec.procsPerNode: 8"),
    (None, ["env", "-u", "X", "A=1", "torchrun", "t.py"], [], "command[4]", "t.py"),
    (None, ["sh", "-c", "cd /w && exec torchrun t.py"], [], "command[0]", None),
    (None, ["bash", "-c", "pip install x; torchrun --nproc-per-node=2 t.py"], [],
     "command[0]", "spec.procsPerNode: 2"),
])
def test_every_launcher_spelling_is_caught(module, command, args, field, run):
    why = launcher_problem(module, command, args, 2, 1)
    assert why is not None and why.startswith(f"spec.workload.{field}: "), why
    assert run is None or run in why, why


@pytest.mark.parametrize("module,command", [
    ("kdist.workloads.ddp", None),
    ("mypkg.train", None),
    (None, ["python", "train.py", "--launcher", "torchrun"]),
    (None, ["python", "-m", "mypkg.torchrun"]),
    (None, ["python", "-c", "import torch.distributed.run"]),
    (None, ["sh", "-c", "python train.py"]),
    (None, ["bash", "-c", "echo 'unbalanced"]),
    (None, ["./torchrun_wrapper.sh"]),
])
def test_what_is_no_launcher_passes(module, command):
    assert launcher_problem(module, command, [], 2, 2) is None


def test_it_shows_beside_the_specs_own_errors(tmp_path):
    path = write_spec(tmp_path, spec_with(**{
        "spec.resources": {"gpus": -1},
        "spec.workload": {"command": ["torchrun", "--nproc-per-node=2", "train.py"]}}))
    res = CliRunner().invoke(main, ["validate", str(path)])
    assert res.exit_code == 2, res.output
    fields = [line.split(": ")[2] for line in res.output.splitlines() if line.startswith("error:")]
    assert fields == ["spec.resources.gpus", "spec.workload.command[0]"], res.output
    assert "spec.procsPerNode: 2" in res.output


def test_torchruns_own_options_are_read_however_it_is_started():
    # --no-python takes no value: the program after it is what runs, with its args.
    for line in (["python", "-m", "torch.distributed.run", "--no-python", "bin/train", "x"],
                 ["sh", "-c", "torchrun --no-python bin/train x"]):
        why = launcher_problem(None, line, [], 1, 1)
        assert why is not None and "{command: [bin/train, x]}" in why, why
        assert "a world of its own inside kdist's one process" in why, why
