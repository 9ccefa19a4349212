"""A user's script sees under kdist what it would see under torchrun itself.

The same probe (programs/env_probe.py) runs under `torchrun` and under `kdist run --local`
with the same layout, port, run id and restart budget; what each launcher adds to the
worker's environment is diffed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from compattools import PROGRAMS, free_port, run_kdist, write_job

pytestmark = [pytest.mark.compat, pytest.mark.timeout(150)]

PROBE = str(PROGRAMS / "env_probe.py")
RUN_ID = "compat-env"  # the job's metadata.name: kdist's run id
# Values a script or library may act on: they must be torchrun's exactly.
MUST_MATCH = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",
)
_ENV_MARK = "ENV {"


def base_env() -> dict[str, str]:
    """What both launchers start from: this process's env without any launcher's variables."""
    env = dict(os.environ)
    for key in list(env):
        if key in MUST_MATCH or key.startswith(("TORCHELASTIC_", "KDIST_")):
            del env[key]
    env["OMP_NUM_THREADS"] = "1"  # else torchrun warns and kdist computes its own
    return env


def probes(text: str, base: dict[str, str]) -> list[tuple[dict[str, str], bool]]:
    """Every probe line in ``text``, in order: (what the launcher added or changed, unbuffered)."""
    found, decoder = [], json.JSONDecoder()
    for line in text.splitlines():
        # Probes of ranks sharing a pipe (torchrun's) may still run together on one line.
        at = line.find(_ENV_MARK)
        while at != -1:
            seen, end = decoder.raw_decode(line, at + len(_ENV_MARK) - 1)
            added = {k: v for k, v in seen["env"].items() if base.get(k) != v}
            found.append((added, seen["unbuffered"]))
            at = line.find(_ENV_MARK, end)
    return found


def by_rank(found: list[tuple[dict[str, str], bool]]) -> dict[int, tuple[dict[str, str], bool]]:
    """The last probe of each global rank (the attempt that finished)."""
    return {int(env["RANK"]): (env, unbuffered) for env, unbuffered in found}


def torchrun(args: list[str], cwd: Path, env: dict[str, str], nodes: int, port: int) -> str:
    """`torchrun` with ``nodes`` agents (static rendezvous, as kdist uses); their output."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes),
             "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
             "--rdzv-id", RUN_ID, *args],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        for node in range(nodes)
    ]
    try:
        outputs = [proc.communicate(timeout=90)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, out in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out
    return "\n".join(outputs)


def kdist_run(tmp_path: Path, env: dict[str, str], port: int, args: list[str]) -> str:
    job = write_job(tmp_path, "env-probe", distributed={"port": port},
                    workload={"args": args})
    code, run = run_kdist(job, tmp_path, timeout=90, env=env)
    assert code == 0, run.text
    return run.text


def test_worker_env_matches_torchrun(tmp_path):
    base = base_env()
    port = free_port()
    reference = by_rank(probes(torchrun(
        ["--nproc-per-node", "1", "--max-restarts", "2", PROBE], tmp_path, base, 2, port), base))
    ours = by_rank(probes(kdist_run(tmp_path, base, port, []), base))
    assert sorted(reference) == sorted(ours) == [0, 1]
    problems = []
    for rank in (0, 1):
        (want, want_unbuffered), (got, got_unbuffered) = reference[rank], ours[rank]
        missing = sorted(set(want) - set(got))
        if missing:
            problems.append(f"rank {rank}: torchrun sets {missing}, kdist does not")
        for key in MUST_MATCH:
            if want.get(key) != got.get(key):
                problems.append(f"rank {rank}: {key}: torchrun {want.get(key)!r}, "
                                f"kdist {got.get(key)!r}")
        if want_unbuffered != got_unbuffered:
            problems.append(f"rank {rank}: unbuffered stdout: torchrun {want_unbuffered}, "
                            f"kdist {got_unbuffered}")
    assert not problems, "\n".join(problems)


def test_restart_variables_after_a_gang_restart(tmp_path):
    """Rank 1 is SIGKILLed once: the next attempt knows it is restart 1 of 2.

    torchrun restarts its workers in place (one agent of two processes is the
    reference); kdist restarts the whole gang. Either way the script must see
    TORCHELASTIC_RESTART_COUNT=1 and TORCHELASTIC_MAX_RESTARTS=2, and kdist adds
    KDIST_RESTART_COUNT.
    """
    base = base_env()
    reference = probes(torchrun(
        ["--nproc-per-node", "2", "--max-restarts", "2", PROBE,
         "--die-once", str(tmp_path / "marker-torchrun")],
        tmp_path, base, 1, free_port()), base)
    ours_text = kdist_run(tmp_path, base, free_port(),
                          ["--die-once", str(tmp_path / "marker-kdist")])
    assert "restart 1 of 2" in ours_text, ours_text
    ours = probes(ours_text, base)
    assert len(reference) == len(ours) == 4, (reference, ours)  # 2 ranks x 2 attempts
    first, last = by_rank(reference[:2]), by_rank(reference[2:])
    assert {r: e["TORCHELASTIC_RESTART_COUNT"] for r, (e, _) in first.items()} == \
        {0: "0", 1: "0"}
    assert {r: e["TORCHELASTIC_RESTART_COUNT"] for r, (e, _) in last.items()} == \
        {0: "1", 1: "1"}
    problems = []
    for attempt, chunk in enumerate((ours[:2], ours[2:])):
        for rank, (env, _) in sorted(by_rank(chunk).items()):
            want = {"TORCHELASTIC_RESTART_COUNT": str(attempt), "TORCHELASTIC_MAX_RESTARTS": "2",
                    "KDIST_RESTART_COUNT": str(attempt)}
            got = {k: env.get(k) for k in want}
            if got != want:
                problems.append(f"attempt {attempt} rank {rank}: {got}, want {want}")
    assert not problems, "\n".join(problems)
