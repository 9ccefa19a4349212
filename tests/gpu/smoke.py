"""GPU smoke test: the whole GPU path through kdist's own CLI, in a few minutes on one GPU.

    python -m tests.gpu.smoke            # on a machine with >= 1 GPU (NCCL)
    BACKEND=gloo python -m tests.gpu.smoke   # dry run of the same steps on CPU

1. DDP through `kdist run --local` (procsPerNode auto = one worker per GPU), 60 steps.
2. The same job killed at step 30 (exit 137), run again: resumes from step 20 and
   ends with parameters bit-equal to the uninterrupted run.
3. The pipeline workload (1F1B) on the same path.
4. bench/gpu.py, quick.
Prints one PASS/FAIL line per step; exit 1 if any failed. Writes only to a temp dir.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BACKEND = os.environ.get("BACKEND", "nccl")


def job(name: str, module: str, args: list[str]) -> dict:
    gpus = 0 if BACKEND == "gloo" else int(os.environ.get("GPUS", "1"))
    return {"apiVersion": "kdist/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name},
            "spec": {"image": "local", "nodes": 1, "procsPerNode": "auto",
                     "workload": {"module": module, "args": args},
                     "distributed": {"backend": BACKEND, "port": 29631},
                     "resources": {"gpus": gpus, "cpu": "4", "memory": "16Gi"},
                     "checkpoint": {"path": "/ckpt", "volume": {"emptyDir": {}}}}}


def run(spec: dict, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    path = cwd / f"{spec['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = subprocess.run([sys.executable, "-m", "kdist", "run", "--local", str(path)],
                          cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    return proc.returncode, proc.stdout + proc.stderr


def model_of(ckpt: Path) -> dict:
    import torch

    return torch.load(ckpt, map_location="cpu", weights_only=True)["model"]


def main() -> int:
    failed = 0

    def check(ok: bool, what: str, detail: str = "") -> None:
        nonlocal failed
        print(f"{'PASS' if ok else 'FAIL'}: {what}" + (f"\n{detail[-2000:]}" if not ok else ""),
              flush=True)
        failed += not ok

    args = ["--max-steps", "60", "--log-every", "10", "--checkpoint-every", "20"]
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp, "a"), Path(tmp, "b")
        a.mkdir(), b.mkdir()
        rc, out = run(job("ddp", "kdist.workloads.ddp", args), a)
        check(rc == 0, f"DDP on {BACKEND}, 60 steps", out)
        rc, out = run(job("ddp", "kdist.workloads.ddp", args), b,
                      {"KDIST_FAULT_KILL_AT": "0:30"})
        check(rc == 137, f"DDP killed at step 30 exits 137 (got {rc})", out)
        rc, out = run(job("ddp", "kdist.workloads.ddp", args), b)
        check(rc == 0 and '"resume"' in out, "DDP resumes from its checkpoint", out)
        try:
            import torch

            same = all(torch.equal(x, y) for x, y in zip(
                model_of(a / ".kdist/ddp/checkpoints/step-60/state.pt").values(),
                model_of(b / ".kdist/ddp/checkpoints/step-60/state.pt").values(), strict=True))
        except (OSError, KeyError, RuntimeError) as e:
            same, out = False, str(e)
        check(same, "the resumed run's parameters equal the uninterrupted run's", out)
        rc, out = run(job("pp", "kdist.workloads.pipeline",
                          ["--schedule", "1f1b", "--max-steps", "40", "--log-every", "10"]), a)
        check(rc == 0, "pipeline (1F1B) on the same path", out)
    if BACKEND != "gloo":
        bench = subprocess.run([sys.executable, "-c", (
            "from bench.harness import Ctx; import bench.gpu as g\n"
            "for k, m in g.run(Ctx(quick=True)).items(): print(k, m.value, m.note)")],
            cwd=REPO, capture_output=True, text=True, timeout=600)
        check(bench.returncode == 0, "bench/gpu.py (quick)", bench.stdout + bench.stderr)
        print(bench.stdout)
    print("ALL CHECKS PASSED" if not failed else f"{failed} CHECK(S) FAILED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
