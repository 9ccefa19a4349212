"""Helpers for the dist tier: real launchers and gloo workers on this machine.

Every job goes through ``kdist.local.run_nodes`` (the local runner's engine)
and ``python -m kdist.launch``, exactly like ``kdist run --local``.
"""

from __future__ import annotations

import io
import json
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from kdist.local import local_env, run_nodes

LAUNCH = ["python", "-m", "kdist.launch"]
# Small enough for 2 cores: a 3-hidden-layer MLP of width 32 on 2048 samples.
TINY = ["--dataset-size", "2048", "--features", "16", "--classes", "4",
        "--hidden", "32", "--layers", "3"]
_PREFIX = re.compile(r"\[(rank|node) (\d+)\] ")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_env(nodes: int, procs: int, node_rank: int, port: int, **extra: str) -> dict[str, str]:
    """The env contract of one node of a local job (as an Indexed Job pod gets it)."""
    env = {
        "KDIST_JOB_NAME": "t",
        "KDIST_NNODES": str(nodes),
        "KDIST_NPROC_PER_NODE": str(procs),
        "KDIST_NODE_RANK": str(node_rank),
        "KDIST_MASTER_ADDR": "127.0.0.1",
        "KDIST_MASTER_PORT": str(port),
        "KDIST_DIST_BACKEND": "gloo",
        "KDIST_PG_TIMEOUT": "60",
        "KDIST_RDZV_TIMEOUT": "60",
        "OMP_NUM_THREADS": "1",
    }
    env.update(extra)
    return env


@dataclass
class Run:
    code: int
    lines: list[str]
    seconds: float

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def events(self, kind: str | None = None) -> list[dict]:
        """The JSON log lines of every rank (prefix stripped), optionally of one kind."""
        found = []
        for line in self.lines:
            body = _PREFIX.sub("", line, count=1)
            if body.startswith("{"):
                event = json.loads(body)
                if kind is None or event["event"] == kind:
                    found.append(event)
        return found


def run_envs(argv: list[str], envs: list[dict[str, str]], launch: list[str] = LAUNCH,
             cwd: Path | None = None) -> Run:
    """`launch` + `argv` on one launcher per env (`launch`: how a pod starts kdist's launcher;
    `cwd`: the processes' working directory, by default this one)."""
    out = io.StringIO()
    started = time.monotonic()
    restarts = int(envs[0].get("KDIST_MAX_RESTARTS", "0"))
    code = run_nodes(launch + argv, [local_env(e) for e in envs], stdout=out,
                     max_restarts=restarts, cwd=cwd)
    return Run(code, out.getvalue().splitlines(), time.monotonic() - started)


def run_job(argv: list[str], *, nodes: int = 1, procs: int = 1, launch: list[str] = LAUNCH,
            cwd: Path | None = None, **extra: str) -> Run:
    """One local job: ``nodes`` launchers of ``procs`` workers on a fresh port."""
    port = free_port()
    return run_envs(argv, [node_env(nodes, procs, i, port, **extra) for i in range(nodes)],
                    launch, cwd)


def final_state(ckpt_dir: Path, shard: str = "state") -> dict:
    """The shard that ``latest`` points at."""
    name = (ckpt_dir / "latest").read_text().strip()
    return torch.load(ckpt_dir / name / f"{shard}.pt", weights_only=True)


def assert_ok(run: Run) -> None:
    assert run.code == 0, run.text
