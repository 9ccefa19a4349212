"""DDP throughput on this machine's CPUs, 2 ranks, gloo.

Per round, in this order (A B C D E F, A B C D E F, ...):

- kdist: ``python -m kdist.launch --module kdist.workloads.ddp`` (one node, 2 processes:
  what a pod with procsPerNode 2 runs, torch's elastic agent included);
- reference: ``torchrun --nproc-per-node 2 bench/reference_ddp.py``, a minimal hand-written
  DDP script on the same model, data, batch and optimizer;
- kdist, 1 rank: ``python -m kdist.workloads.ddp`` alone (a group of one);
- two independent 1-rank runs at once: what 2 cores give 2 processes that never talk,
  the ceiling for weak scaling on this machine;
- the seed's approach: ``torchrun ... bench/seed_ddp.py`` (no DistributedSampler,
  per-sample DataLoader batches over a Python list), read as unique samples/s;
- kdist with ``--grad-compression bf16`` (gradients all-reduced in bf16).

At least 5 rounds (``ROUNDS``), whatever ``--rounds`` says. Every process gets
OMP_NUM_THREADS=1 (one core per rank). Throughput is rank 0's
``samples_per_s`` at its best step line after the warm-up ones (see
``harness.steady_rate``); ratios are per round, then the median.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ThreadPoolExecutor

from bench.harness import (
    BENCH,
    PYTHON,
    Ctx,
    Measured,
    Spec,
    clean_env,
    free_port,
    interleave,
    median,
    ratios,
    run_json,
    steady_rate,
)

ROUNDS = 5  # the floor for kdist_vs_reference's median (issue 27)
EVERY, SKIP = 10, 2  # step lines every 10 steps; the first 20 steps are warm-up
MODEL = "MLP 64-512x4-10 (0.8M params), batch 256 per rank, SGD momentum, 65,536 samples"
KDIST = "python -m kdist.launch --module kdist.workloads.ddp (1 node x 2 procs, gloo)"
REFERENCE = "torchrun --nproc-per-node 2 bench/reference_ddp.py (gloo)"

FIGURES = [
    Spec("ddp.kdist_vs_reference", "DDP throughput, kdist / reference", "x",
         f"{KDIST}; {MODEL}; OMP_NUM_THREADS=1", f"{REFERENCE}; same model, data, batch, threads",
         ">= 1.00", 1.0),
    Spec("ddp.kdist_samples_per_s", "DDP throughput, kdist, 2 ranks", "samples/s", KDIST,
         "(absolute; see ddp.kdist_vs_reference)"),
    Spec("ddp.reference_samples_per_s", "DDP throughput, reference, 2 ranks", "samples/s",
         REFERENCE, "(absolute)"),
    Spec("ddp.weak_scaling", "weak scaling: 2-rank / (2 x 1-rank)", "fraction",
         f"{KDIST}, batch 256 per rank", "2 x python -m kdist.workloads.ddp (1 rank, 1 thread)"),
    Spec("ddp.machine_ceiling", "what 2 cores allow: 2 lone 1-rank runs at once / (2 x 1-rank)",
         "fraction", "two python -m kdist.workloads.ddp (1 rank each) at the same time",
         "2 x the same run alone"),
    Spec("ddp.weak_scaling_of_ceiling", "weak scaling / what the machine allows", "fraction",
         "ddp.weak_scaling", "ddp.machine_ceiling", ">= 0.90", 0.9),
    Spec("ddp.bf16_compression_vs_fp32", "DDP throughput, --grad-compression bf16 / default",
         "x", f"{KDIST} --grad-compression bf16", KDIST),
    Spec("ddp.seed_unique_samples_per_s", "seed's approach, unique samples/s", "samples/s",
         "torchrun --nproc-per-node 2 bench/seed_ddp.py (DataLoader(list(zip(x, y))), "
         "no DistributedSampler)", "(absolute)"),
    Spec("ddp.kdist_vs_seed", "DDP unique samples/s, kdist / seed's approach", "x", KDIST,
         "bench/seed_ddp.py, unique samples/s"),
]


def _args(steps: int) -> list[str]:
    # No checkpoints: clean_env drops KDIST_CHECKPOINT_DIR, so kdist writes none either.
    return ["--max-steps", str(steps), "--log-every", str(EVERY), "--batch-size", "256"]


def _kdist2(steps: int, *extra: str) -> float:
    env = clean_env(1, KDIST_NNODES="1", KDIST_NPROC_PER_NODE="2",
                    KDIST_MASTER_ADDR="127.0.0.1", KDIST_MASTER_PORT=str(free_port()),
                    KDIST_DIST_BACKEND="gloo", KDIST_JOB_NAME="bench-ddp")
    run = run_json([PYTHON, "-m", "kdist.launch", "--module", "kdist.workloads.ddp", "--",
                    *_args(steps), *extra], env=env)
    return steady_rate(run, skip=SKIP)


def _torchrun(script: str, steps: int, field: str = "samples_per_s") -> float:
    cmd = [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           str(BENCH / script), *_args(steps)]
    return steady_rate(run_json(cmd, env=clean_env(1)), field, skip=SKIP)


def _kdist1(steps: int) -> float:
    return steady_rate(run_json([PYTHON, "-m", "kdist.workloads.ddp", *_args(steps)],
                                env=clean_env(1)), skip=SKIP)


def _two_alone(steps: int) -> float:
    """Two 1-rank runs started together; the sum of their rates."""
    with ThreadPoolExecutor(2) as pool:
        return sum(pool.map(lambda _: _kdist1(steps), range(2)))


def run(ctx: Ctx) -> dict[str, Measured]:
    steps = 60 if ctx.quick else 100
    rounds = max(ctx.rounds, ROUNDS)
    v = interleave({
        "kdist": lambda: _kdist2(steps),
        "reference": lambda: _torchrun("reference_ddp.py", steps),
        "kdist-1rank": lambda: _kdist1(steps),
        "two-1rank-at-once": lambda: _two_alone(steps),
        "seed-unique": lambda: _torchrun("seed_ddp.py", steps, "unique_samples_per_s"),
        "kdist-bf16-compression": lambda: _kdist2(steps, "--grad-compression", "bf16"),
    }, rounds, ctx.say)
    weak = [k2 / (2 * k1) for k2, k1 in zip(v["kdist"], v["kdist-1rank"], strict=True)]
    ceiling = [t / (2 * k1) for t, k1 in zip(v["two-1rank-at-once"], v["kdist-1rank"],
                                             strict=True)]
    spread = (f"{steps} steps per run, first {EVERY * SKIP} skipped, best {EVERY}-step interval; "
              f"{rounds} interleaved rounds")
    return {
        "ddp.kdist_vs_reference": Measured(median(ratios(v["kdist"], v["reference"])),
                                           ratios(v["kdist"], v["reference"]), spread),
        "ddp.kdist_samples_per_s": Measured(median(v["kdist"]), v["kdist"]),
        "ddp.reference_samples_per_s": Measured(median(v["reference"]), v["reference"]),
        "ddp.weak_scaling": Measured(median(weak), weak,
                                     f"1-rank median {statistics.median(v['kdist-1rank']):,.0f}"
                                     " samples/s"),
        "ddp.machine_ceiling": Measured(median(ceiling), ceiling),
        "ddp.weak_scaling_of_ceiling": Measured(
            median(w / c for w, c in zip(weak, ceiling, strict=True)),
            [w / c for w, c in zip(weak, ceiling, strict=True)]),
        "ddp.bf16_compression_vs_fp32": Measured(
            median(ratios(v["kdist-bf16-compression"], v["kdist"])),
            ratios(v["kdist-bf16-compression"], v["kdist"])),
        "ddp.seed_unique_samples_per_s": Measured(median(v["seed-unique"]), v["seed-unique"]),
        "ddp.kdist_vs_seed": Measured(median(ratios(v["kdist"], v["seed-unique"])),
                                      ratios(v["kdist"], v["seed-unique"])),
    }
