"""The bench parses stdout alone, and a failed benchmark fails the run (issue 56).

No process is started: `subprocess.Popen` is replaced by a command that writes
given text on each stream, merged as a pipe would when stderr=STDOUT is asked.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import harness, run
from bench.harness import BenchError, Measured, Skip, Spec

MANIFEST = "---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: ttr-kubectl-1\n"
WARNING = ("warning: job.yaml: spec.workload.args[6]: --checkpoint-every is given but no "
           "checkpoint will be written: there is no spec.checkpoint (nor --checkpoint-dir)\n")


def fake_popen(out: str, err: str, rc: int = 0) -> type:
    class Popen:
        def __init__(self, argv: list[str], *, stdout: Any, stderr: Any, **_: Any) -> None:
            self.args, self.pid, self.returncode = argv, -1, None
            merged = stderr == subprocess.STDOUT
            self._out, self._err = (err + out, None) if merged else (out, err)
            self.stdout = io.StringIO(self._out)
            self.stderr = None if merged else io.StringIO(self._err or "")

        def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
            self.returncode = rc
            return self._out, self._err

        def wait(self, timeout: float | None = None) -> int:
            self.returncode = rc
            return rc

        def poll(self) -> int | None:
            return self.returncode

    return Popen


def test_run_cmd_hands_back_stdout_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # bench/cluster.py writes this output to the file `kubectl apply -f` reads.
    monkeypatch.setattr(subprocess, "Popen", fake_popen(MANIFEST, WARNING))
    done = harness.run_cmd(["kdist", "render", "job.yaml"])
    assert [d["kind"] for d in yaml.safe_load_all(done.out) if d] == ["Job"]
    assert done.err == WARNING and done.rc == 0


def test_run_cmd_failure_shows_the_tail_of_both_streams(
        monkeypatch: pytest.MonkeyPatch) -> None:
    err = "Traceback (most recent call last):\n  ...\nValueError: boom\n"
    monkeypatch.setattr(subprocess, "Popen", fake_popen("step 1\n", err, rc=1))
    with pytest.raises(BenchError) as e:
        harness.run_cmd(["python", "-m", "kdist.launch"])
    said = str(e.value)
    assert said.splitlines()[0] == "python -m kdist.launch exited 1"
    assert "ValueError: boom" in said and "step 1" in said


def test_run_lines_stamps_stdout_lines_only(monkeypatch: pytest.MonkeyPatch) -> None:
    out = "trainingjob/x created in namespace ns\njob x succeeded in 9s\n"
    monkeypatch.setattr(subprocess, "Popen", fake_popen(out, WARNING))
    lines, _ = harness.run_lines(["kdist", "submit", "job.yaml", "--wait"])
    assert [text for _, text in lines] == out.splitlines()


# --- run.py: a failed benchmark against a skipped one --------------------------------------


def bench_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, raised: Exception) -> None:
    """A one-figure benchmark `fake` that raises `raised`, with a figure measured before."""
    module = types.ModuleType("fake_bench")
    module.FIGURES = [Spec("fake.figure_s", "a figure", "s", "a", "b")]  # type: ignore[attr-defined]

    def bench_run(ctx: Any) -> dict[str, Measured]:
        raise raised

    module.run = bench_run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_bench", module)
    monkeypatch.setattr(run, "BENCHMARKS", {"fake": "fake_bench"})
    monkeypatch.setattr(run, "RESULTS", tmp_path / "results.json")
    monkeypatch.setattr(run, "README", tmp_path / "README.md")
    (tmp_path / "README.md").write_text(f"{run.BEGIN}\n{run.END}\n")
    (tmp_path / "results.json").write_text(json.dumps({"fake.figure_s": {
        "title": "a figure", "value": 1.5, "unit": "s", "skipped": ""}}))


def test_a_failed_benchmark_fails_the_run_naming_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    error = BenchError("kubectl apply -f ttr.yaml exited 1\n--- its stderr, last lines:\n"
                       "error: mapping values are not allowed in this context")
    bench_module(monkeypatch, tmp_path, error)
    assert run.main(["--only", "fake"]) == 1
    said = capsys.readouterr().err.split("== FAILED", 1)[1]
    assert "fake (fake.figure_s)" in said and "mapping values are not allowed" in said
    kept = json.loads((tmp_path / "results.json").read_text())["fake.figure_s"]
    assert kept["value"] == 1.5  # the last figure measured stays


def test_a_bug_in_a_benchmark_fails_the_run(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench_module(monkeypatch, tmp_path, KeyError("items"))
    assert run.main(["--only", "fake"]) == 1
    assert "KeyError: 'items'" in capsys.readouterr().err.split("== FAILED", 1)[1]


def test_a_benchmark_this_machine_cannot_run_is_skipped(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench_module(monkeypatch, tmp_path, Skip("no cluster: .cluster/kubeconfig does not exist"))
    assert run.main(["--only", "fake"]) == 0
    figure = json.loads((tmp_path / "results.json").read_text())["fake.figure_s"]
    assert figure["value"] is None
    assert figure["skipped"] == "skipped: no cluster: .cluster/kubeconfig does not exist"
    assert "FAILED" not in capsys.readouterr().err


def test_the_kwok_job_lands_on_fake_nodes_only():
    """bench/kwok.py's job (the scale benchmark's and tests/e2e/test_scale_kwok.py's) is a
    valid kdist job whose pods select kwok's nodes, tolerate their taint, and carry the
    label kwok's stage ends them by (tests/cluster/kwok.sh)."""
    from bench import kube
    from bench.kwok import RUN_FOR, job_text

    objs = kube.rendered(job_text("wide", "ns", nodes=1000, run_for="20s", gang="native"))
    job = next(o for o in objs if o["kind"] == "Job")
    pod = job["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"type": "kwok"}
    assert {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"} in \
        pod["spec"]["tolerations"]
    assert pod["metadata"]["labels"][RUN_FOR] == "20s"
    assert job["spec"]["completions"] == 1000
    assert any(o["kind"] == "PodGroup" for o in objs)


def test_every_figure_has_a_name_of_its_own() -> None:
    """results.json is keyed by name: a figure two benchmarks declare is overwritten by
    the one that runs (or is skipped) last (scalekube's kwok status once shared the
    fake-API one's name)."""
    import importlib
    from collections import Counter

    names = Counter(spec.name for module in run.BENCHMARKS.values()
                    for spec in importlib.import_module(module).FIGURES)
    assert [n for n, count in names.items() if count > 1] == []


def test_a_commands_peak_memory_is_its_own_not_the_harness() -> None:
    """wait4's ru_maxrss counted the memory a child had before its exec, a copy of the
    harness's: `kdist status` against kwok showed 303 MB, the benchmark's own list of
    1,000 pods' objects. The command's own peak is polled (VmHWM)."""
    from bench import kwok

    held = b"x" * (200 << 20)  # the harness holding much, written so it is resident
    cost = kwok.measure([sys.executable, "-c", "import time; x = b'y' * (40 << 20); "
                         "time.sleep(0.3)"])
    assert len(held) and 40 <= cost.rss_mb < 150, cost.rss_mb  # ru_maxrss: > 200 here
