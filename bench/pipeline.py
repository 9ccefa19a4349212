"""Pipeline parallelism: p = 2 stages, m micro-batches, against the unsplit model.

Throughput, interleaved per round (unsplit, GPipe, 1F1B, then unsplit and 1F1B
at batch 1024, then the micro-batched unsplit at both batches, ...):

- unsplit: ``python -m bench.unsplit``, kdist's MLP whole in one process, 1 thread;
- micro-batched: ``python -m bench.unsplit --microbatches M``, the same with the batch cut into m
  micro-batches whose gradients accumulate: what micro-batching alone costs;
- ``python -m kdist.launch --module kdist.workloads.pipeline -- --schedule S
  --microbatches m``, 2 processes (one stage each), 1 thread each.

Batch 256 makes micro-batches of 64; the batch-1024 pair (micro-batches of
256) shows how much of the gap to the bound is a fixed cost per message.

With balanced stages and free communication, p stages on p cores do the unsplit
model's work at p x m/(m+p-1) its speed (the rest is the bubble): that is the
bound each schedule is held to. The MLP is 6 blocks (64-1024x5-10) so that the
2 stages carry the same 2 of 4 big layers each.

Memory: one short run of each under ``bench.memprobe`` (torch profiler, CPU
allocator events): the peak tensor bytes each process held, per stage and for
the unsplit model, on a small data set so the data does not dominate.
"""

from __future__ import annotations

from bench.harness import (
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

P = 2
M = 4
BOUND = P * M / (M + P - 1)
EVERY, SKIP = 2, 2  # step lines every 2 steps; the first 4 (shape inference) are warm-up
SHAPE = ["--layers", "5", "--hidden", "1024"]
BATCH, BIG = 256, 1024  # micro-batches of 64; and of 256, to show the per-message cost
MODEL = f"MLP 64-1024x5-10 (4.3M params), batch {BATCH}, SGD momentum"
UNSPLIT = "python -m bench.unsplit (whole model, 1 process, 1 thread)"
MICRO = (f"python -m bench.unsplit --microbatches {M} (whole model, 1 process, "
         "gradients accumulated over the micro-batches)")


def _pipe(schedule: str) -> str:
    return (f"python -m kdist.launch --module kdist.workloads.pipeline -- --schedule {schedule} "
            f"--microbatches {M} (p={P} stages, 1 thread each, gloo)")


def _specs() -> list[Spec]:
    out = []
    for s, label in (("gpipe", "GPipe"), ("1f1b", "1F1B")):
        out += [
            Spec(f"pipeline.{s}_vs_unsplit", f"{label} p={P} m={M} throughput / unsplit", "x",
                 f"{_pipe(s)}; {MODEL}", UNSPLIT, f"bound p*m/(m+p-1) = {BOUND:.2f}"),
            Spec(f"pipeline.{s}_of_bound", f"{label} throughput / the bubble bound", "fraction",
                 f"pipeline.{s}_vs_unsplit", f"{BOUND:.2f} (p*m/(m+p-1), p={P}, m={M})",
                 "ideal 1.00"),
            Spec(f"pipeline.{s}_peak_mem_vs_unsplit",
                 f"{label} peak tensor memory, largest stage / unsplit", "fraction",
                 f"bench.memprobe around {_pipe(s)}", f"bench.memprobe around {UNSPLIT}",
                 f"ideal 1/p = {1 / P:.2f}"),
        ]
    out += [
        Spec("pipeline.1f1b_big_vs_unsplit",
             f"1F1B p={P} m={M}, batch {BIG} (micro-batches of {BIG // M}) / unsplit", "x",
             f"{_pipe('1f1b')}; batch {BIG}", f"{UNSPLIT}; batch {BIG}",
             f"bound {BOUND:.2f}"),
        Spec("pipeline.1f1b_big_of_bound", f"... / the bubble bound, batch {BIG}", "fraction",
             "pipeline.1f1b_big_vs_unsplit", f"{BOUND:.2f}", "ideal 1.00"),
        Spec("pipeline.1f1b_vs_gpipe", f"1F1B / GPipe throughput, p={P} m={M}", "x",
             _pipe("1f1b"), _pipe("gpipe")),
        Spec("pipeline.microbatch_cost", f"micro-batching alone: unsplit / {M} micro-batches "
             f"of {BATCH // M}, one process", "x", MICRO, UNSPLIT),
        Spec("pipeline.microbatch_cost_big", f"... micro-batches of {BIG // M}, batch {BIG}",
             "x", f"{MICRO}; batch {BIG}", f"{UNSPLIT}; batch {BIG}"),
        Spec("pipeline.unsplit_samples_per_s", "unsplit model throughput, 1 thread", "samples/s",
             UNSPLIT, "(absolute)"),
        Spec("pipeline.unsplit_peak_mem_mib", "unsplit model peak tensor memory", "MiB",
             f"bench.memprobe around {UNSPLIT}", "(absolute; params + grads + momentum = "
             "3 x 16.3 MiB)"),
    ]
    return out


FIGURES = _specs()


def _unsplit(steps: int, extra: list[str], probe: bool = False,
             batch: int = BATCH) -> list[dict]:
    cmd = [PYTHON, "-m", *(["bench.memprobe"] if probe else []), "bench.unsplit", *SHAPE,
           "--batch-size", str(batch), *extra, "--max-steps", str(steps)]
    return run_json(cmd, env=clean_env(1)).records


def _pipeline(schedule: str, steps: int, extra: list[str], probe: bool = False,
              batch: int = BATCH) -> list[dict]:
    env = clean_env(1, KDIST_NNODES="1", KDIST_NPROC_PER_NODE=str(P),
                    KDIST_MASTER_ADDR="127.0.0.1", KDIST_MASTER_PORT=str(free_port()),
                    KDIST_DIST_BACKEND="gloo", KDIST_JOB_NAME="bench-pipeline")
    module = ["bench.memprobe", "--", "kdist.workloads.pipeline"] if probe else \
        ["kdist.workloads.pipeline", "--"]
    cmd = [PYTHON, "-m", "kdist.launch", "--module", *module, *SHAPE,
           "--batch-size", str(batch), *extra,
           "--schedule", schedule, "--microbatches", str(M), "--max-steps", str(steps),
           "--checkpoint-every", "0"]
    return run_json(cmd, env=env).records


def _rate(records: list[dict]) -> float:
    return steady_rate(Run(records, 0.0, str(records[-3:])), skip=SKIP)


def _peaks(records: list[dict]) -> dict[int, int]:
    peaks = {r["rank"]: r["peak_bytes"] for r in records if r.get("event") == "memory"}
    if not peaks:
        raise BenchError(f"no memory line from bench.memprobe: {records[-3:]}")
    return peaks


def run(ctx: Ctx) -> dict[str, Measured]:
    steps = 16 if ctx.quick else 20
    timing = ["--log-every", str(EVERY)]
    v = interleave({
        "unsplit": lambda: _rate(_unsplit(steps, timing)),
        "gpipe": lambda: _rate(_pipeline("gpipe", steps, timing)),
        "1f1b": lambda: _rate(_pipeline("1f1b", steps, timing)),
        f"unsplit-{BIG}": lambda: _rate(_unsplit(steps, timing, batch=BIG)),
        f"1f1b-{BIG}": lambda: _rate(_pipeline("1f1b", steps, timing, batch=BIG)),
        "micro": lambda: _rate(_unsplit(steps, [*timing, "--microbatches", str(M)])),
        f"micro-{BIG}": lambda: _rate(_unsplit(steps, [*timing, "--microbatches", str(M)],
                                               batch=BIG)),
    }, ctx.rounds, ctx.say)
    small = ["--dataset-size", "2048", "--log-every", "2"]
    ctx.say("    memory: one profiled run each (unsplit, gpipe, 1f1b)")
    unsplit_peak = _peaks(_unsplit(4, small, probe=True))[0]
    out: dict[str, Measured] = {}
    note = (f"{steps} steps per run, first {EVERY * SKIP} skipped, best {EVERY}-step interval; "
            f"{ctx.rounds} interleaved rounds")
    for s in ("gpipe", "1f1b"):
        speedups = ratios(v[s], v["unsplit"])
        out[f"pipeline.{s}_vs_unsplit"] = Measured(median(speedups), speedups, note)
        out[f"pipeline.{s}_of_bound"] = Measured(median(speedups) / BOUND,
                                                 [x / BOUND for x in speedups])
        peaks = _peaks(_pipeline(s, 4, small, probe=True))
        per_stage = ", ".join(f"stage {r}: {b / 2**20:.1f} MiB" for r, b in sorted(peaks.items()))
        out[f"pipeline.{s}_peak_mem_vs_unsplit"] = Measured(
            max(peaks.values()) / unsplit_peak, [b / unsplit_peak for b in peaks.values()],
            f"{per_stage}; unsplit {unsplit_peak / 2**20:.1f} MiB (peak tensor bytes, "
            "torch profiler CPU allocator events)")
    big = ratios(v[f"1f1b-{BIG}"], v[f"unsplit-{BIG}"])
    out["pipeline.1f1b_big_vs_unsplit"] = Measured(median(big), big, note)
    out["pipeline.1f1b_big_of_bound"] = Measured(median(big) / BOUND, [x / BOUND for x in big])
    out["pipeline.1f1b_vs_gpipe"] = Measured(median(ratios(v["1f1b"], v["gpipe"])),
                                             ratios(v["1f1b"], v["gpipe"]))
    for key, unsplit, micro in (("microbatch_cost", "unsplit", "micro"),
                                ("microbatch_cost_big", f"unsplit-{BIG}", f"micro-{BIG}")):
        cost = ratios(v[unsplit], v[micro])
        out[f"pipeline.{key}"] = Measured(median(cost), cost, note)
    out["pipeline.unsplit_samples_per_s"] = Measured(median(v["unsplit"]), v["unsplit"])
    out["pipeline.unsplit_peak_mem_mib"] = Measured(unsplit_peak / 2**20, [])
    return out
