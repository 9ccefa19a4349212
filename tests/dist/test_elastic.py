"""An elastic gang goes on without a frozen node, and the node, thawed, is fenced (issue 55).

Three node ranks with ``minNodes`` 2 and no spare, real launchers and gloo workers,
restarting in process as pods restarting in place. Node 2's (or node 1's) launcher and
workers are stopped with SIGSTOP (a node frozen or cut off); the survivors find it lost
within ``nodeLossSeconds``, node 0 does not wait for it: the gang re-forms at 2 nodes
(generation 1; node 1 lost, node 2 becomes node rank 1) and resumes with ``WORLD_SIZE`` 2
from the survivors' memory (DDP's copy), no step lost, and ends with the parameters of an
uninterrupted run (the global batch kept; test_elastic_batch.py states the tolerance). Then
the frozen node comes back (SIGCONT): it finds the gang went on without it and exits 206
(fenced) without touching anything, and the job finishes on 2 nodes, exit 0; the ledger
records the shrink.

Growing back: once the fenced node is gone, a new launcher for its slot starts (as its
replacement pod would); it waits holding no rank and asks to be admitted; node 0 stops the
gang at a step boundary (every rank saves that step), the launchers meet at 3 nodes
(generation 2) and the workers resume from that step with ``WORLD_SIZE`` 3: 0 steps lost.

``python tests/dist/test_elastic.py [RUNS]`` measures "frozen -> re-formed" and "frozen ->
first resumed step" (docs/restarts.md, "Elastic jobs"); ``... grow [RUNS]``, "newcomer
started -> re-formed at 3" and "newcomer started -> first step at 3".
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from disttools import LAUNCH, TINY, final_state, free_port, node_env, run_job  # noqa: E402
from test_elastic_batch import PARAMS_TOL, worst_difference  # noqa: E402
from test_node_loss import freeze, thaw  # noqa: E402
from test_preemption import launcher_of_node  # noqa: E402

NODES, MIN_NODES = 3, 2  # the figures' job; the drill also runs 2 nodes, minNodes 1
#: The last step's loss (mean over ranks) of a resized run against an uninterrupted one,
#: relative (docs/restarts.md, "Elastic jobs"): only the order of float sums differs.
LOSS_REL = 1e-2
LOSS_S = 5
NEVER = 1000  # a checkpoint interval beyond the steps run
# Enough steps after the resume (about 10 s) for the frozen node, thawed then, to be fenced before
# the survivors finish (the run ends once minNodes nodes succeeded).
STEPS = 120
ARGV = ["--module", "kdist.workloads.ddp", "--", *TINY, "--max-steps", str(STEPS),
        "--log-every", "1", "--checkpoint-every", "5", "--step-delay", "0.1"]


def shrank(lost: int, size: int = 2) -> str:
    return f"kdist.launch: the gang shrank to {size} nodes: node {lost} lost"


def argv(steps: int = STEPS, every: int = 5) -> list[str]:
    """ARGV with `steps` steps and a checkpoint every `every` steps (and at the end)."""
    out = [*ARGV[:ARGV.index("--max-steps") + 1], str(steps),
           *ARGV[ARGV.index("--max-steps") + 2:]]
    out[out.index("--checkpoint-every") + 1] = str(every)
    return out


def start(tmp: Path, loss_s: int = LOSS_S, nodes: int = NODES,
          min_nodes: int = MIN_NODES, steps: int = STEPS, every: int = 5,
          more: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`nodes` nodes restarting in process, elastic down to `min_nodes`, in a child process
    that prints its ledger as JSON at the end (a checkpoint every `every` steps); `more`:
    variables every node gets besides."""
    from kdist.local import local_env

    extra = dict(KDIST_CHECKPOINT_DIR=str(tmp / "ckpt"), KDIST_TEST_ROOT=str(os.getpid()),
                 KDIST_NODE_LOSS_SECONDS=str(loss_s), KDIST_PG_TIMEOUT="120",
                 KDIST_MAX_RESTARTS="2", KDIST_RDZV_TIMEOUT="180",
                 KDIST_MIN_NODES=str(min_nodes), **(more or {}))
    port = free_port()
    envs = [{**local_env(node_env(nodes, 1, i, port, **extra)), "KDIST_RESTART_COUNT": "0",
             "KDIST_RESTART_DIR": str(tmp / f"restarts-{i}")} for i in range(nodes)]
    for env in envs:
        Path(env["KDIST_RESTART_DIR"]).mkdir()
    (tmp / "envs.json").write_text(json.dumps(envs))
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from kdist.local import run_nodes
        from kdist.local.ledger import LocalLedger
        envs = json.loads(Path({str(tmp / "envs.json")!r}).read_text())
        ledger = LocalLedger(max_restarts=2)
        code = run_nodes([*{LAUNCH!r}, *{argv(steps, every)!r}], envs, max_restarts=2,
                         ledger=ledger, restart_dirs=[Path(e["KDIST_RESTART_DIR"]) for e in envs],
                         ranks={nodes - 1}, fail_grace_s=60)
        print("LEDGER " + json.dumps(ledger.summary(code == 0)), flush=True)
        sys.exit(code)
    """)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=envs[0])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """(nodes, steps) -> (final state, last step's mean loss over ranks) of the same job at
    full size, never interrupted (no step delay: it changes no number)."""
    done: dict[tuple[int, int], tuple[dict, float]] = {}

    def get(nodes: int, steps: int) -> tuple[dict, float]:
        if (nodes, steps) not in done:
            ckpt = tmp_path_factory.mktemp(f"uninterrupted-{nodes}")
            run = run_job(["--module", "kdist.workloads.ddp", "--", *TINY, "--max-steps",
                           str(steps), "--log-every", "1", "--checkpoint-every", "0",
                           "--checkpoint-dir", str(ckpt)], nodes=nodes,
                          KDIST_FULL_WORLD_SIZE=str(nodes))
            assert run.code == 0, run.text
            done[nodes, steps] = final_state(ckpt), last_loss(run.lines, steps)
        return done[nodes, steps]

    return get


def last_loss(lines: list[str], steps: int) -> float:
    """The mean over ranks of the last step's loss (each rank's share of the global batch)."""
    losses = [r["loss"] for r in records(lines, "step") if r["step"] == steps]
    return sum(losses) / len(losses)


def assert_same_training(tmp: Path, lines: list[str], want: tuple[dict, float],
                         steps: int) -> None:
    """The resized run ended where the uninterrupted one did: parameters within
    PARAMS_TOL, the last step's loss within LOSS_REL of its own (the global batch kept)."""
    state, loss = want
    worst = worst_difference(final_state(tmp / "ckpt"), state)
    print(f"resized vs uninterrupted: parameters within {worst:.2e}, last loss "
          f"{last_loss(lines, steps):.6g} vs {loss:.6g}")  # the figures, with -s
    assert worst <= PARAMS_TOL
    assert abs(last_loss(lines, steps) - loss) <= LOSS_REL * loss, (last_loss(lines, steps), loss)


def is_step(line: str, rank: int) -> bool:
    return line.startswith(f"[rank {rank}] ") and '"event": "step"' in line


def drill(proc: subprocess.Popen[str], lost: int = 2, size: int = 2, *, measure: bool = False
          ) -> tuple[list[str], float | None, float | None]:
    """Freeze node `lost` after 8 of its steps (a checkpoint at step 5, if every 5); thaw
    it at the gang's first resumed step. The output read, and the seconds from the freeze
    to the gang re-formed (node 0's shrink line) and to its first resumed step
    (`measure`: stop reading there)."""
    assert proc.stdout is not None
    lines: list[str] = []
    frozen_at = reformed = resumed = None
    groups: list[int] = []
    steps = 0
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            if frozen_at is None:
                steps += is_step(line, lost)
                if steps >= 8:
                    groups = freeze(launcher_of_node(os.getpid(), lost), signal.SIGSTOP)
                    frozen_at = time.monotonic()
                continue
            if reformed is None and line.startswith(f"[node 0] {shrank(lost, size)}"):
                reformed = time.monotonic() - frozen_at
            if resumed is None and '"event": "resume"' in line:
                resumed = time.monotonic() - frozen_at
                if measure:
                    return lines, reformed, resumed
                thaw(groups)  # the node comes back while the gang trains smaller
                groups = []
    finally:
        thaw(groups)
    proc.wait(timeout=120)
    return lines, reformed, resumed


def records(lines: list[str], event: str) -> list[dict]:
    return [json.loads(line.split("] ", 1)[1]) for line in lines
            if line.startswith("[rank ") and f'"event": "{event}"' in line]


@pytest.mark.timeout(400)
@pytest.mark.parametrize(("nodes", "min_nodes", "lost"), [(3, 2, 2), (3, 2, 1), (2, 1, 1)],
                         ids=["node-2", "node-1-renumbered", "two-nodes-to-one"])
def test_the_survivors_go_on_smaller_and_the_frozen_node_is_fenced(tmp_path, nodes, min_nodes,
                                                                   lost, uninterrupted):
    # A checkpoint only at the end: a resume from anything but memory would start over.
    proc = start(tmp_path, nodes=nodes, min_nodes=min_nodes, every=NEVER)
    size = nodes - 1
    lines, reformed, resumed = drill(proc, lost, size)
    text = "\n".join(lines)
    assert reformed is not None and resumed is not None, text  # without the node coming back
    # every survivor took the smaller gang: node 0 kept rank 0 and the store, another
    # survivor holds rank 1 (node 1 lost of 3: node 2 was renumbered to rank 1)
    survivors = [n for n in range(nodes) if n != lost]
    for node in survivors:
        assert any(line.startswith(f"[node {node}] {shrank(lost, size)} (generation 1: node "
                                   f"ranks held by slots {', '.join(map(str, survivors))})")
                   for line in lines), text
    # the lost node, back, was fenced before it said a restart of its own
    fenced = [line for line in lines if line.startswith(f"[node {lost}] kdist.launch: fenced")]
    assert fenced and fenced[-1].endswith("exiting 206"), text
    assert not any(line.startswith(f"[node {lost}] kdist.launch: restarting")
                   for line in lines), text
    assert f"kdist: node {lost} was fenced" in text, text
    assert proc.returncode == 0, text
    # the training finished on the survivors, resumed at the smaller size from the memory of
    # one of them (DDP's copy: the state of the larger gang is the same training's)
    back = records(lines, "resume")
    assert back and {r["rank"] for r in back} == set(range(size)), text
    assert all(r["world_size"] == size for r in back), back
    assert all(r["source"].startswith("memory of rank ") for r in back), back
    after = next(i for i, line in enumerate(lines) if '"event": "resume"' in line)
    shrunk_steps = records(lines[after:], "step")
    assert shrunk_steps and {r["world_size"] for r in shrunk_steps} == {size}, text
    assert max(r["step"] for r in shrunk_steps) == STEPS, text
    done = records(lines, "done")
    assert sorted(d["rank"] for d in done) == list(range(size)), text
    restarts = json.loads(next(line[len("LEDGER "):] for line in lines
                               if line.startswith("LEDGER ")))["restarts"]
    assert len(restarts) == 1 and f"node {lost} lost (silent for" in restarts[0]["cause"], \
        restarts
    assert restarts[0]["shrank"] == f"shrank to {size} nodes: node {lost} lost", restarts
    assert restarts[0]["stepsLost"] == 0 and restarts[0]["secondsLost"] > 0, restarts
    assert restarts[0]["resumedFrom"].startswith("memory of rank "), restarts
    assert_same_training(tmp_path, lines, uninterrupted(nodes, STEPS), STEPS)


def measure(runs: int) -> None:
    """Median seconds from node 2 frozen (nodeLossSeconds 10) to the gang re-formed at 2
    nodes, and to its first resumed step."""
    import tempfile

    took: dict[str, list[float]] = {"re-formed": [], "first resumed step": []}
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            proc = start(Path(tmp), loss_s=10)
            try:
                _, reformed, resumed = drill(proc, measure=True)
            finally:
                if proc.poll() is None:
                    os.kill(proc.pid, signal.SIGINT)
                    try:
                        proc.communicate(timeout=60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
            for name, seconds in (("re-formed", reformed), ("first resumed step", resumed)):
                if seconds is not None:
                    took[name].append(seconds)
    for name, seconds in took.items():
        if seconds:
            print(f"frozen -> {name}: median {statistics.median(seconds):.1f} s of "
                  f"{len(seconds)} ({', '.join(f'{t:.1f}' for t in seconds)})", flush=True)




# Grow-back: room after the shrink for the newcomer to start, ask, and be admitted (about
# 15 s here), and for the steps at 3 nodes after it.
GROW_STEPS = 400


def newcomer(tmp: Path, slot: int, steps: int, into: list[str], lock: threading.Lock
             ) -> tuple[subprocess.Popen[str], threading.Thread]:
    """A new launcher for `slot` (its pod replaced), its lines into `into` (its own as
    "[new] kdist.launch: ...", its workers' as they come, "[rank N] ...")."""
    env = json.loads((tmp / "envs.json").read_text())[slot]
    env.update(KDIST_RESTART_DIR=str(tmp / "restarts-new"), KDIST_RESTART_COUNT="0")
    Path(env["KDIST_RESTART_DIR"]).mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "kdist.launch", *argv(steps)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with lock:
                line = line.rstrip("\n")
                into.append("[new] " + line if line.startswith("kdist.launch: ") else line)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return proc, thread


def grow_drill(tmp: Path, lost: int = 2) -> tuple[list[str], int | None, dict[str, float]]:
    """Freeze node `lost` after 8 of its steps; thaw it once the gang resumed smaller (it is
    fenced); once fenced, start its slot anew. The lines (the newcomer's too), its exit code,
    and seconds from the newcomer's start to node 0's grow line and to the first step at
    the full size."""
    proc = start(tmp, steps=GROW_STEPS)
    assert proc.stdout is not None
    lines: list[str] = []
    lock = threading.Lock()
    groups: list[int] = []
    frozen = resumed = False
    steps = 0
    new: subprocess.Popen[str] | None = None
    pump: threading.Thread | None = None
    began = 0.0
    took: dict[str, float] = {}
    try:
        for line in proc.stdout:
            line = line.rstrip("\n")
            with lock:
                lines.append(line)
            if not frozen:
                steps += is_step(line, lost)
                if steps >= 8:
                    groups = freeze(launcher_of_node(os.getpid(), lost), signal.SIGSTOP)
                    frozen = True
            elif not resumed and '"event": "resume"' in line:
                resumed = True
                thaw(groups)
                groups = []
            elif new is None and f"kdist: node {lost} was fenced" in line:
                new, pump = newcomer(tmp, lost, GROW_STEPS, lines, lock)
                began = time.monotonic()
            elif new is not None and "grown" not in took and \
                    line.startswith("[node 0] kdist.launch: the gang grew to"):
                took["grown"] = time.monotonic() - began
            elif "grown" in took and "first step" not in took and is_step(line, 0) and \
                    '"world_size": 3' in line:
                took["first step"] = time.monotonic() - began
    finally:
        thaw(groups)
        proc.wait(timeout=120)
        if new is not None:
            try:
                new.wait(timeout=120)
            except subprocess.TimeoutExpired:
                new.kill()
                new.wait()
        if pump is not None:
            pump.join(timeout=10)
    lines.append(f"RUNNER EXIT {proc.returncode}")
    return lines, None if new is None else new.returncode, took


@pytest.mark.timeout(400)
def test_the_gang_grows_back_at_a_step_boundary_and_loses_no_step(tmp_path, uninterrupted):
    lines, new_code, _ = grow_drill(tmp_path)
    text = "\n".join(lines)
    assert "RUNNER EXIT 0" in text and new_code == 0, text
    # the old launcher stayed fenced; the newcomer (no rank) was admitted as node rank 2
    assert any(line.startswith("[node 2] kdist.launch: fenced") for line in lines), text
    assert "[new] kdist.launch: spare in slot 2 takes node rank 2" in lines, text
    grew = ("kdist.launch: the gang grew to 3 nodes: slot 2 admitted at a step boundary "
            "(generation 2: node ranks held by slots 0, 1, 2)")
    for who in ("[node 0]", "[node 1]"):
        assert f"{who} {grew}" in lines, text
    # every rank of the 2-node gang stopped after the same step, saved it, and the 3-node
    # gang resumed from exactly that step: the step numbers go on without a gap or a repeat
    stopped = records(lines, "preempted")
    assert {r["rank"] for r in stopped} == {0, 1} and len({r["step"] for r in stopped}) == 1, \
        stopped
    assert {r["world_size"] for r in stopped} == {2}, stopped
    at = stopped[0]["step"]
    back = [r for r in records(lines, "resume") if r["world_size"] == 3]
    assert {r["rank"] for r in back} == {0, 1, 2} and {r["step"] for r in back} == {at}, back
    grown_at = lines.index(f"[node 0] {grew}")
    before = [r["step"] for r in records(lines[:grown_at], "step") if r["rank"] == 0 and
              r["world_size"] == 2]
    after = [r["step"] for r in records(lines[grown_at:], "step") if r["rank"] == 0]
    assert max(before) == at and after == list(range(at + 1, GROW_STEPS + 1)), (before, after)
    assert sorted(d["rank"] for d in records(lines, "done")) == [0, 1, 2], text
    assert all(d["world_size"] == 3 for d in records(lines, "done")), text
    ledger = json.loads(next(line[len("LEDGER "):] for line in lines
                             if line.startswith("LEDGER ")))
    restarts = ledger["restarts"]
    assert len(restarts) == 2 and restarts[0]["shrank"] == "shrank to 2 nodes: node 2 lost", \
        restarts
    assert restarts[1]["grew"] == "grew to 3 nodes: slot 2 admitted", restarts
    assert restarts[1]["stepsLost"] == 0 and restarts[1]["resumedStep"] == at, restarts
    assert_same_training(tmp_path, lines, uninterrupted(NODES, GROW_STEPS), GROW_STEPS)


def measure_grow(runs: int) -> None:
    """Median seconds from the newcomer's start to the gang re-formed at 3 nodes, and to
    its first step at 3 nodes."""
    import tempfile

    took: dict[str, list[float]] = {"grown": [], "first step": []}
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            _, _, seen = grow_drill(Path(tmp))
            for name, seconds in seen.items():
                took[name].append(seconds)
    for name, seconds in took.items():
        if seconds:
            print(f"newcomer started -> {name} at 3 nodes: median "
                  f"{statistics.median(seconds):.1f} s of {len(seconds)} "
                  f"({', '.join(f'{t:.1f}' for t in seconds)})", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["grow"]:
        measure_grow(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
    else:
        measure(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
