"""`Client.train(local=True)`: a function on every rank of a 2-node local job, as
`kdist run --local` runs it; rank 0's return value comes back, a rank's exception
comes back as JobFailed naming it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from disttools import free_port

import kdist
from kdist.shared.errors import JobFailed

FNS = Path(__file__).with_name("trainfns")


@pytest.fixture
def remote(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # local runs keep their state under ./.kdist/<name>/
    monkeypatch.syspath_prepend(str(FNS))
    import remote as module

    yield module
    sys.modules.pop("remote", None)
    sys.modules.pop("helper", None)


def spec() -> dict:
    return {"distributed": {"backend": "gloo", "port": free_port()}}


@pytest.mark.timeout(180)
def test_a_function_on_two_nodes_returns_rank_0s_value(remote, tmp_path, capsys):
    value = kdist.Client().train(remote.world_sum, nodes=2, args={"scale": 10, "tag": "t"},
                                 local=True, spec=spec(), name="sum")
    assert value == {"rank": 0, "world": 2, "sum": 30.0, "node": 0, "tag": "t",
                     "helper": "helper from the shipped workdir"}
    out = capsys.readouterr().out
    assert "KDIST-RESULT" not in out, out  # the frames are the client's, not the user's
    # What ran is the shipped copy of the function's directory, not the source tree.
    workspace = tmp_path / ".kdist" / "sum" / "workspace"
    assert sorted(p.name for p in workspace.glob("*.py")) == ["helper.py", "remote.py"]


def raising(module) -> int:
    """The line of `module`'s file that raises fail_on's ValueError."""
    lines = Path(module.__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if 'raise ValueError(f"bad batch' in line)


@pytest.mark.timeout(180)
def test_an_exception_on_a_rank_is_job_failed_naming_it(remote):
    with pytest.raises(JobFailed) as failed:
        kdist.train(remote.fail_on, nodes=2, args=[1], local=True, spec=spec())
    message = str(failed.value)
    first = message.splitlines()[0]
    # Where in the user's code: the line of remote.py that raised.
    assert first == f"rank 1 raised ValueError: bad batch on rank 1 (remote.py:{raising(remote)})"
    assert "in fail_on" in message and 'raise ValueError(f"bad batch' in message, message


@pytest.mark.timeout(180)
def test_the_value_travels_as_json_and_one_json_cannot_carry_is_named(remote):
    value = kdist.train(remote.shaped, nodes=2, args=[False], local=True, spec=spec())
    assert value[0] == 0 and value[1] != value[1] and value[2] == {"world": "2"}
    assert isinstance(value, list), "a tuple comes back as a list: JSON has no tuples"
    with pytest.raises(JobFailed) as failed:
        kdist.train(remote.shaped, nodes=2, args=[True], local=True, spec=spec())
    first = str(failed.value).splitlines()[0]
    assert first == ("rank 0 raised RuntimeError: the return value of shaped cannot come "
                     "back: result['blob']: a bytes cannot travel as JSON; return str "
                     "(decode it, or base64 it)"), str(failed.value)


@pytest.mark.timeout(180)
def test_a_script_runs_on_every_rank(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(
        "import os, sys\nprint('hello from rank', os.environ['RANK'], sys.argv[1:])\n")
    assert kdist.Client().train(code / "train.py", nodes=2, args=["--x", "1"], local=True,
                                spec=spec()) is None
    out = capsys.readouterr().out
    for rank in (0, 1):
        assert f"[rank {rank}] hello from rank {rank} ['--x', '1']" in out, out


@pytest.mark.timeout(180)
def test_run_local_with_an_observer_sees_every_rank_to_the_end(tmp_path, monkeypatch):
    """What `kdist run --local` on a terminal draws its table from (kdist.api.localview)."""
    from kdist import api
    from kdist.spec import validate_job

    monkeypatch.chdir(tmp_path)
    script = ("import json, os\nr = int(os.environ['RANK'])\n"
              "for s in (1, 2, 3):\n"
              "    print(json.dumps({'event': 'step', 'step': s, 'loss': 1 / s + r}))\n")
    job = validate_job({"apiVersion": "kdist/v1alpha1", "kind": "TrainingJob",
                        "metadata": {"name": "seen"},
                        "spec": {"image": "x:1", "nodes": 2, **spec(),
                                 "workload": {"command": ["python", "-c", script]}}})

    class Seen:
        def __init__(self) -> None:
            self.lines: list[str] = []
            self.state = None
            self.stopped = False

        def start(self, state): self.state = state
        def update(self, state): self.state = state
        def tick(self, state): pass
        def warning(self, text): pass
        def log(self, rank, line): pass
        def message(self, text): self.lines.append(text)
        def stop(self): self.stopped = True

    seen = Seen()
    assert api.run_local(job, observer=seen) == 0
    state = seen.state
    assert seen.stopped and state.outcome == "Succeeded"
    assert {r: (s.step, s.loss) for r, s in state.ranks.items()} == {0: (3, 1 / 3),
                                                                     1: (3, 1 + 1 / 3)}
    assert sum(line.startswith("[rank ") for line in seen.lines) == 6, seen.lines
