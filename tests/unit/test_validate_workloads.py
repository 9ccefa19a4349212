"""validate knows kdist's own workloads: a misspelt module or flag is exit 2 with a
did-you-mean, naming the field; a script the pods cannot find and a --checkpoint-every that
writes nothing are warned about (exit 0). None of it imports torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from kdist.cli import main
from tests.unit.golden import ROOT
from tests.unit.helpers import spec_with, write_spec


def validate(tmp_path, **changes):
    path = write_spec(tmp_path, spec_with(**changes))
    return path, CliRunner().invoke(main, ["validate", str(path)])


def errors(res) -> list[str]:
    return [line for line in res.output.splitlines() if line.startswith("error:")]


def warnings(res) -> list[str]:
    return [line for line in res.output.splitlines() if line.startswith("warning:")]


def test_an_unknown_kdist_workload_is_refused_with_did_you_mean(tmp_path):
    path, res = validate(tmp_path, **{"spec.workload.module": "kdist.workloads.dpp"})
    assert res.exit_code == 2, res.output
    assert errors(res) == [f"error: {path}: spec.workload.module: 'kdist.workloads.dpp' is not "
                           "one of kdist's workloads (did you mean 'kdist.workloads.ddp'?)"]


def test_a_helper_module_is_not_a_workload(tmp_path):
    _, res = validate(tmp_path, **{"spec.workload.module": "kdist.workloads.common"})
    assert res.exit_code == 2 and "spec.workload.module" in res.output, res.output


def test_a_users_own_module_is_not_judged(tmp_path):
    _, res = validate(tmp_path, **{"spec.workload.module": "mypkg.train",
                                   "spec.workload.args": ["--maxsteps", "5"]})
    assert res.exit_code == 0, res.output


def test_an_unknown_workload_arg_is_refused_naming_its_index(tmp_path):
    path, res = validate(tmp_path, **{"spec.workload.args": ["--lr", "0.1", "--maxsteps", "5"]})
    assert res.exit_code == 2, res.output
    assert errors(res) == [f"error: {path}: spec.workload.args[2]: unknown argument "
                           "'--maxsteps' of kdist.workloads.ddp (did you mean '--max-steps'?)"]


@pytest.mark.parametrize("module,args,problems", [
    ("ddp", ["--max-steps=5", "--lr", "-0.5", "--grad-compression", "bf16"], []),
    ("ddp", ["--max-step", "5"], []),  # argparse takes a unique prefix
    ("ddp", ["--check", "5"], [(0, "ambiguous")]),
    ("ddp", ["--max-steps"], [(0, "needs a value")]),
    ("ddp", ["--max-steps", "--lr", "1"], [(0, "needs a value")]),
    ("ddp", ["5"], [(0, "unexpected argument '5'")]),
    ("fsdp", ["--activation-checkpointing", "--tp", "2"], []),
    ("fsdp", ["--activation-checkpointing=yes"], [(0, "takes no value")]),
    ("fsdp", ["--schedule", "1f1b"], [(0, "unknown argument '--schedule'")]),
    ("pipeline", ["--schedule", "gpipe", "--stages", "2"], []),
])
def test_argparse_rules(module, args, problems):
    from kdist.spec.workloads import args_problems

    got = args_problems(f"kdist.workloads.{module}", args)
    assert [i for i, _ in got] == [i for i, _ in problems], got
    for (_, why), (_, want) in zip(got, problems, strict=True):
        assert want in why


def test_a_relative_script_without_workdir_is_warned_about(tmp_path):
    path, res = validate(tmp_path, **{"spec.workload": {"command": ["python", "train.py"]}})
    assert res.exit_code == 0, res.output
    [line] = warnings(res)
    assert line.startswith(f"warning: {path}: spec.workload.command[1]: 'train.py' is a "
                           "relative path") and "look for it in the image" in line
    for quiet in ({"command": ["python", "/app/train.py"]},
                  {"command": ["python", "-m", "mypkg.train"]}):
        _, res = validate(tmp_path, **{"spec.workload": quiet})
        assert res.exit_code == 0 and not warnings(res), res.output
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print(1)\n")
    _, res = validate(tmp_path, **{"spec.workload": {"command": ["python", "train.py"]},
                                   "spec.workdir": "code"})
    assert res.exit_code == 0 and not warnings(res), res.output


def test_checkpoint_every_without_a_directory_is_warned_about(tmp_path):
    path, res = validate(tmp_path, **{"spec.workload.args": ["--checkpoint-every", "10"]})
    assert res.exit_code == 0, res.output
    assert warnings(res) == [f"warning: {path}: spec.workload.args[0]: --checkpoint-every is "
                             "given but no checkpoint will be written: there is no "
                             "spec.checkpoint (nor --checkpoint-dir)"]
    for changes in ({"spec.workload.args": ["--checkpoint-every", "10",
                                            "--checkpoint-dir", "/tmp/c"]},
                    # 0 turns checkpoints off, as the benches ask: nothing to warn about
                    {"spec.workload.args": ["--checkpoint-every", "0"]},
                    {"spec.workload.args": ["--checkpoint-every=0"]},
                    {"spec.workload.args": ["--checkpoint-every", "10"],
                     "spec.checkpoint": {"path": "/ckpt", "volume": {
                         "persistentVolumeClaim": {"claimName": "c"}}}}):
        _, res = validate(tmp_path, **changes)
        assert res.exit_code == 0 and not warnings(res), res.output


def test_validate_imports_no_torch(tmp_path):
    path = write_spec(tmp_path, spec_with(**{"spec.workload.args": ["--maxsteps", "5"]}))
    code = ("import sys\nfrom kdist.cli import main\n"
            "try:\n    main(['validate', sys.argv[1]])\nexcept SystemExit as e:\n"
            "    assert 'torch' not in sys.modules, 'validate imported torch'\n"
            "    raise SystemExit(e.code)\n")
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, cwd=ROOT)
    assert res.returncode == 2, res.stderr
    assert "did you mean '--max-steps'" in res.stderr and "validate imported torch" not in \
        res.stderr


def test_a_script_missing_from_the_workdir_is_refused_with_did_you_mean(tmp_path):
    (tmp_path / "code" / "src").mkdir(parents=True)
    (tmp_path / "code" / "src" / "train.py").write_text("print(1)\n")
    path, res = validate(tmp_path, **{"spec.workload": {"command": ["python", "src/trian.py"]},
                                      "spec.workdir": "code"})
    assert res.exit_code == 2, res.output
    assert errors(res) == [
        f"error: {path}: spec.workload.command[1]: 'src/trian.py' is not in the workdir "
        f"{tmp_path / 'code'} (spec.workdir), where the workers start; did you mean "
        "'src/train.py'?"]
    for there in (["python", "./src/train.py"], ["python", "-u", "src/train.py", "--x", "a.py"],
                  ["python", "-m", "src.train"], ["bash", "run.sh"], ["python", "/app/t.py"]):
        _, res = validate(tmp_path, **{"spec.workload": {"command": there},
                                       "spec.workdir": "code"})
        assert res.exit_code == 0, (there, res.output)
    # The script in args, and --workdir instead of spec.workdir (render, submit, run too).
    job = write_spec(tmp_path, spec_with(**{"spec.workload": {"command": ["python"],
                                                              "args": ["train.py"]}}))
    res = CliRunner().invoke(main, ["render", str(job), "--workdir", str(tmp_path / "code")])
    assert res.exit_code == 2, res.output
    assert "spec.workload.args[0]: 'train.py' is not in the workdir " in res.output
    assert "(--workdir)" in res.output and "did you mean 'src/train.py'?" in res.output


def test_a_bad_flag_value_is_refused_once_in_argparses_words(tmp_path):
    path, res = validate(tmp_path, **{"spec.workload.args": [
        "--lr", "fast", "--dtype=fp8", "--max-steps", "0", "--seed", "-3",
        "--checkpoint-dir", "$(KDIST_CHECKPOINT_DIR)/x", "--log-every", "$(EVERY)"]})
    assert res.exit_code == 2, res.output
    lr, dtype, steps = errors(res)
    assert lr == f"error: {path}: spec.workload.args[1]: argument --lr: invalid float value: " \
                 "'fast'"
    # Python's own wording of the choices (quoted or not) varies between versions.
    assert dtype.startswith(f"error: {path}: spec.workload.args[2]: argument --dtype: invalid "
                            "choice: 'fp8' (choose from ") and "fp32" in dtype, dtype
    assert steps == f"error: {path}: spec.workload.args[4]: --max-steps must be >= 1"
    assert "usage:" not in res.output


@pytest.mark.parametrize("module,args,problem", [
    ("pipeline", ["--schedule", "zb"], "argument --schedule: invalid choice: 'zb'"),
    ("ddp", ["--grad-compression", "int8"], "argument --grad-compression: invalid choice"),
    ("ddp", ["--max-step=2.5"], "argument --max-steps: invalid int value: '2.5'"),
    ("ddp", ["--step-delay", "4000"], "--step-delay must be between 0 and 3600 seconds"),
    ("fsdp", ["--ffn", "-1"], "--ffn must be >= 0"),
    ("fsdp", ["--tp", "2", "--weight-decay", "0.01", "--dtype", "bf16"], None),
])
def test_values_as_the_workloads_parse_them(module, args, problem):
    from kdist.spec.workloads import args_problems

    got = args_problems(f"kdist.workloads.{module}", args)
    assert [why for _, why in got] == ([] if problem is None else [got[0][1]]), got
    assert problem is None or problem in got[0][1], got


def test_a_schema_error_and_a_workdir_error_show_at_once(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "bad\\name.py").write_text("")
    path, res = validate(tmp_path, **{"spec.nodes": 0, "spec.workdir": "code",
                                      "spec.workload": {"command": ["python", "t.py"]}})
    assert res.exit_code == 2, res.output
    got = errors(res)
    assert got[0] == f"error: {path}: spec.nodes: must be >= 1, got 0", got
    assert len(got) == 2 and got[1].startswith(f"error: {path}: spec.workdir: ") and \
        "bad\\name.py" in got[1], got
    path, res = validate(tmp_path, **{"spec.workdir": "nowhere",
                                      "spec.workload.args": ["--maxsteps", "5"]})
    assert res.exit_code == 2, res.output
    assert [line.split(": ")[2] for line in errors(res)] == ["spec.workload.args[0]",
                                                         "spec.workdir"], res.output
