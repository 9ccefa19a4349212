"""FSDP2 on this machine's CPUs, 2 ranks, gloo: kdist's workload against a plain script.

Per round, in this order (A B C, A B C, ...; at least 5 rounds):

- kdist: ``python -m kdist.launch --module kdist.workloads.fsdp`` (one node, 2 processes);
- reference: ``torchrun --nproc-per-node 2 bench/reference_fsdp.py``, a minimal hand-written
  FSDP2 script (``fully_shard`` per block and at the root) on the same transformer, tokens,
  batch order and AdamW;
- DDP: the same script with ``--wrap ddp`` (DistributedDataParallel on the same model).

Throughput is rank 0's ``samples_per_s`` at its best step line after the warm-up
ones; ratios are per round, then the median.

Memory, two ways, on a model whose parameters, gradients and AdamW state dwarf its
activations and data (16 blocks of width 256, 12.7M parameters, batch 2 x 8 tokens):

- state: ``bench.fsdp_state`` adds up the bytes of the parameters, gradients and AdamW
  state one rank holds after a step (DTensors by their local shard), at 2 ranks and
  unsharded: what FSDP2 divides by N;
- peak: one 1-step run each under ``bench.memprobe`` (the pipeline bench's probe: peak
  tensor bytes from the torch profiler's CPU allocator events) of kdist's workload at 2
  ranks and of the unsharded model in one process (``reference_fsdp.py --wrap none``);
  it adds the one or two blocks FSDP2 gathers at a time and their gradients before the
  reduce-scatter. Over gloo it is an upper bound that grows with the step count (the
  plain script's too: the profiler misses frees done on gloo's threads), hence 1 step.
"""

from __future__ import annotations

from bench.harness import (
    BENCH,
    PYTHON,
    BenchError,
    Ctx,
    Measured,
    Run,
    Spec,
    clean_env,
    free_port,
    interleave,
    median,
    ratios,
    run_json,
    steady_rate,
)

RANKS = 2
ROUNDS = 5
EVERY, SKIP = 5, 2  # step lines every 5 steps; the first 10 steps are warm-up
SHAPE = ["--hidden", "128", "--layers", "4", "--heads", "4", "--seq-len", "32",
         "--vocab", "256", "--batch-size", "8", "--dataset-size", "4096"]
MEM_SHAPE = ["--hidden", "256", "--layers", "16", "--heads", "4", "--seq-len", "8",
             "--vocab", "256", "--batch-size", "2", "--dataset-size", "64"]
MEM_MODEL = "transformer 16 x 256 (12.7M params), batch 2 x 8 tokens, AdamW"
MODEL = ("transformer 4 x 128 wide, seq 32, vocab 256 (0.9M params), batch 8 per rank, "
         "AdamW")
KDIST = f"python -m kdist.launch --module kdist.workloads.fsdp (1 node x {RANKS} procs, gloo)"
REFERENCE = f"torchrun --nproc-per-node {RANKS} bench/reference_fsdp.py (fully_shard, gloo)"
DDP = f"torchrun --nproc-per-node {RANKS} bench/reference_fsdp.py --wrap ddp"
GOAL_MEM = 1.2 / RANKS

FIGURES = [
    Spec("fsdp.kdist_vs_reference", "FSDP2 throughput, kdist / reference", "x",
         f"{KDIST}; {MODEL}; OMP_NUM_THREADS=1", f"{REFERENCE}; same model, data, batch",
         ">= 1.00", 1.0),
    Spec("fsdp.kdist_samples_per_s", "FSDP2 throughput, kdist, 2 ranks", "samples/s", KDIST,
         "(absolute)"),
    Spec("fsdp.reference_samples_per_s", "FSDP2 throughput, reference, 2 ranks", "samples/s",
         REFERENCE, "(absolute)"),
    Spec("fsdp.vs_ddp", "FSDP2 (kdist) / DDP throughput, same model", "x", KDIST,
         f"{DDP}; same model, data, batch"),
    Spec("fsdp.state_mem_vs_unsharded",
         f"per-rank parameters + gradients + AdamW state at {RANKS} ranks / unsharded",
         "fraction", f"python -m bench.fsdp_state under {KDIST}; {MEM_MODEL}",
         "python -m bench.fsdp_state --unsharded (the plain model, one process)",
         f"<= 1.2/N = {GOAL_MEM:.2f}", GOAL_MEM, higher_is_better=False),
    Spec("fsdp.peak_mem_vs_unsharded",
         f"per-rank peak tensor memory at {RANKS} ranks / unsharded, 1 step", "fraction",
         f"bench.memprobe around {KDIST}; {MEM_MODEL}",
         "bench.memprobe around bench/reference_fsdp.py --wrap none (one process)",
         f"ideal 1/N = {1 / RANKS:.2f} (an upper bound over gloo)"),
]


def _steps(steps: int) -> list[str]:
    return ["--max-steps", str(steps), "--log-every", str(EVERY)]


def _launch_env() -> dict[str, str]:
    return clean_env(1, KDIST_NNODES="1", KDIST_NPROC_PER_NODE=str(RANKS),
                     KDIST_MASTER_ADDR="127.0.0.1", KDIST_MASTER_PORT=str(free_port()),
                     KDIST_DIST_BACKEND="gloo", KDIST_JOB_NAME="bench-fsdp")


def _kdist(steps: int) -> float:
    run = run_json([PYTHON, "-m", "kdist.launch", "--module", "kdist.workloads.fsdp", "--",
                    *SHAPE, *_steps(steps), "--checkpoint-every", "0"], env=_launch_env())
    return steady_rate(run, skip=SKIP)


def _torchrun(steps: int, wrap: str) -> float:
    cmd = [PYTHON, "-m", "torch.distributed.run", "--nproc-per-node", str(RANKS),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           str(BENCH / "reference_fsdp.py"), "--wrap", wrap, *SHAPE, *_steps(steps)]
    return steady_rate(run_json(cmd, env=clean_env(1)), skip=SKIP)


def _peaks(run: Run) -> dict[int, int]:
    peaks = {r["rank"]: r["peak_bytes"] for r in run.records if r.get("event") == "memory"}
    if not peaks:
        raise BenchError(f"no memory line from bench.memprobe: {run.records[-3:]}")
    return peaks


def _memory() -> tuple[dict[int, int], int]:
    """(1-step peak bytes per rank of kdist's FSDP2 run, the unsharded model's)."""
    steps = ["--max-steps", "1", "--log-every", "1"]
    sharded = run_json([PYTHON, "-m", "kdist.launch", "--module", "bench.memprobe", "--",
                        "kdist.workloads.fsdp", *MEM_SHAPE, *steps, "--checkpoint-every", "0"],
                       env=_launch_env(), timeout=600)
    whole = run_json([PYTHON, "-m", "bench.memprobe", "bench.reference_fsdp", "--wrap", "none",
                      *MEM_SHAPE, *steps], env=clean_env(1), timeout=600)
    return _peaks(sharded), _peaks(whole)[0]


def _state() -> tuple[dict[int, int], int]:
    """(state bytes per rank at RANKS ranks, unsharded state bytes)."""
    def total(run: Run) -> dict[int, int]:
        found = {r["rank"]: r["params"] + r["grads"] + r["optimizer"]
                 for r in run.records if r.get("event") == "state"}
        if not found:
            raise BenchError(f"no state line from bench.fsdp_state: {run.records[-3:]}")
        return found

    sharded = run_json([PYTHON, "-m", "kdist.launch", "--module", "bench.fsdp_state", "--",
                        *MEM_SHAPE], env=_launch_env())
    whole = run_json([PYTHON, "-m", "bench.fsdp_state", "--unsharded", *MEM_SHAPE],
                     env=clean_env(1))
    return total(sharded), total(whole)[0]


def run(ctx: Ctx) -> dict[str, Measured]:
    steps = 30 if ctx.quick else 40
    rounds = max(ctx.rounds, ROUNDS)
    v = interleave({
        "kdist": lambda: _kdist(steps),
        "reference": lambda: _torchrun(steps, "fsdp"),
        "ddp": lambda: _torchrun(steps, "ddp"),
    }, rounds, ctx.say)
    ctx.say("    memory: state bytes, then one profiled run each (2 ranks, unsharded)")
    held, whole_state = _state()
    peaks, whole = _memory()
    note = (f"{steps} steps per run, first {EVERY * SKIP} skipped, best {EVERY}-step interval; "
            f"{rounds} interleaved rounds")
    per_rank = ", ".join(f"rank {r}: {b / 2**20:.1f} MiB" for r, b in sorted(peaks.items()))
    return {
        "fsdp.kdist_vs_reference": Measured(median(ratios(v["kdist"], v["reference"])),
                                            ratios(v["kdist"], v["reference"]), note),
        "fsdp.kdist_samples_per_s": Measured(median(v["kdist"]), v["kdist"]),
        "fsdp.reference_samples_per_s": Measured(median(v["reference"]), v["reference"]),
        "fsdp.vs_ddp": Measured(median(ratios(v["kdist"], v["ddp"])),
                                ratios(v["kdist"], v["ddp"]), note),
        "fsdp.state_mem_vs_unsharded": Measured(
            max(held.values()) / whole_state, [b / whole_state for b in held.values()],
            ", ".join(f"rank {r}: {b / 2**20:.1f} MiB" for r, b in sorted(held.items()))
            + f"; unsharded {whole_state / 2**20:.1f} MiB"),
        "fsdp.peak_mem_vs_unsharded": Measured(
            max(peaks.values()) / whole, [b / whole for b in peaks.values()],
            f"{per_rank}; unsharded {whole / 2**20:.1f} MiB (peak tensor bytes, torch "
            "profiler CPU allocator events)"),
    }
