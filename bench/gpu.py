"""DDP with NCCL on this machine's GPUs: samples/s and the share of the GPUs' bf16 peak.

Runs only where ``torch.cuda.is_available()``. ``kdist.launch`` starts one
process per GPU (``KDIST_NPROC_PER_NODE=auto``, backend nccl) running
``kdist.workloads.ddp`` on a model big enough to keep a GPU busy. Model FLOPs
per sample = 6 x parameters (forward 2, backward 4, per weight); achieved =
samples/s x that; the peak is the dense bf16 tensor-core figure of the GPU
model (table below; an unknown GPU gets samples/s and TFLOP/s only). The
workload trains in fp32 (it has no bf16/autocast flag), so the share of the
bf16 peak is bounded by the GPU's fp32/tf32 rate: the figure says how far
the workload is from what the hardware offers, not how well NCCL scales.

FSDP2 bf16: ``kdist.workloads.fsdp --dtype bf16`` (bf16 parameters, compute and
gradient reduce-scatter, fp32 master weights) on a 24-block transformer of
width 2048 (1.3B parameters incl. embeddings), 1024 tokens per sample. Model
FLOPs per token = 6 x parameters (less the embedding's) + 12 x layers x seq x width (attention's
score and value matmuls, forward and backward); the share of the bf16 peak
is that MFU.
"""

from __future__ import annotations

import json
import re

from bench.harness import (
    PYTHON,
    BenchError,
    Ctx,
    Measured,
    Skip,
    Spec,
    clean_env,
    free_port,
    median,
    run_cmd,
    run_json,
    steady_rate,
)

# Dense bf16 tensor-core peak per GPU, TFLOP/s (vendor datasheets, SXM where both exist).
BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0,
                    "A10": 125.0, "B200": 2250.0, "GH200": 989.0}
HIDDEN, LAYERS, FEATURES, CLASSES, BATCH = 4096, 8, 1024, 1000, 1024
PARAMS = (FEATURES * HIDDEN + HIDDEN) + (LAYERS - 1) * (HIDDEN * HIDDEN + HIDDEN) \
    + (HIDDEN * CLASSES + CLASSES)
MODEL = (f"MLP {FEATURES}-{HIDDEN}x{LAYERS}-{CLASSES} ({PARAMS / 1e6:.0f}M params), "
         f"batch {BATCH} per GPU, fp32")
KDIST = f"python -m kdist.launch --module kdist.workloads.ddp (1 process per GPU, nccl); {MODEL}"

T_VOCAB, T_SEQ, T_WIDTH, T_HEADS, T_LAYERS, T_BATCH = 32000, 1024, 2048, 16, 24, 8
T_PARAMS = T_LAYERS * 12 * T_WIDTH * T_WIDTH + 2 * T_VOCAB * T_WIDTH + T_SEQ * T_WIDTH
# The embedding is a lookup, no matmul: its parameters do no FLOPs.
T_FLOPS_PER_SAMPLE = T_SEQ * (6 * (T_PARAMS - (T_VOCAB + T_SEQ) * T_WIDTH)
                              + 12 * T_LAYERS * T_SEQ * T_WIDTH)
FSDP = (f"python -m kdist.launch --module kdist.workloads.fsdp --dtype bf16 (1 process per "
        f"GPU, nccl); transformer {T_LAYERS} x {T_WIDTH} ({T_PARAMS / 1e9:.1f}B params), "
        f"seq {T_SEQ}, batch {T_BATCH} per GPU")

FIGURES = [
    Spec("gpu.ddp_samples_per_s", "DDP with NCCL, all GPUs", "samples/s", KDIST, "(absolute)"),
    Spec("gpu.ddp_bf16_peak_fraction", "achieved model FLOP/s / GPUs' dense bf16 peak",
         "fraction", KDIST, "bf16 dense peak x GPUs (datasheet)"),
    Spec("gpu.fsdp_bf16_samples_per_s", "FSDP2 bf16 with NCCL, all GPUs", "samples/s", FSDP,
         "(absolute)"),
    Spec("gpu.fsdp_bf16_peak_fraction", "FSDP2 bf16: model FLOP/s / GPUs' dense bf16 peak (MFU)",
         "fraction", FSDP, "bf16 dense peak x GPUs (datasheet)"),
]


def _probe() -> dict:
    code = ("import json, torch; ok = torch.cuda.is_available(); print(json.dumps({'ok': ok, "
            "'n': torch.cuda.device_count() if ok else 0, "
            "'name': torch.cuda.get_device_name(0) if ok else ''}))")
    out = run_cmd([PYTHON, "-c", code], env=clean_env(), timeout=120).out
    return json.loads(out.strip().splitlines()[-1])


def _peak(name: str) -> float | None:
    """The peak for a device name such as "NVIDIA H100 80GB HBM3" or "NVIDIA A100-SXM4-80GB".

    Whole tokens only: a substring would take an L40 for an L4, an A10G for an
    A10 and a GB200 for a B200.
    """
    tokens = re.split(r"[^A-Za-z0-9]+", name.upper())
    found = [BF16_PEAK_TFLOPS[t] for t in tokens if t in BF16_PEAK_TFLOPS]
    return found[0] if found else None


def _rates(ctx: Ctx, module: str, args: list[str]) -> list[float]:
    rates = []
    for r in range(ctx.rounds):
        env = clean_env(4, KDIST_NNODES="1", KDIST_NPROC_PER_NODE="auto",
                        KDIST_MASTER_ADDR="127.0.0.1", KDIST_MASTER_PORT=str(free_port()),
                        KDIST_DIST_BACKEND="nccl", KDIST_JOB_NAME="bench-gpu")
        run = run_json([PYTHON, "-m", "kdist.launch", "--module", module, "--", *args],
                       env=env, timeout=600)
        rates.append(steady_rate(run, skip=2))
        ctx.say(f"    {module} run {r + 1}/{ctx.rounds}: {rates[-1]:,.1f} samples/s")
    if not rates:
        raise BenchError("no runs")
    return rates


def _share(rate: float, rates: list[float], flops_per_sample: float, gpus: dict,
           peak: float | None) -> tuple[Measured, Measured]:
    tflops = rate * flops_per_sample / 1e12
    note = f"{gpus['n']} x {gpus['name']}; {tflops:.1f} TFLOP/s achieved"
    fraction = Measured(None, skipped=f"no bf16 peak on file for {gpus['name']!r}; {note}") \
        if peak is None else Measured(tflops / (peak * gpus["n"]), [], note)
    return Measured(rate, rates, note), fraction


def run(ctx: Ctx) -> dict[str, Measured]:
    gpus = _probe()
    if not gpus["ok"]:
        raise Skip("no GPU here (torch.cuda.is_available() is False)")
    steps = 60 if ctx.quick else 150
    args = ["--max-steps", str(steps), "--log-every", "10", "--batch-size", str(BATCH),
            "--hidden", str(HIDDEN), "--layers", str(LAYERS), "--features", str(FEATURES),
            "--classes", str(CLASSES), "--dataset-size", str(BATCH * gpus["n"] * 16),
            "--checkpoint-every", "0"]
    peak = _peak(gpus["name"])
    rates = _rates(ctx, "kdist.workloads.ddp", args)
    ddp, ddp_share = _share(median(rates), rates, 6 * PARAMS, gpus, peak)
    fsdp_args = ["--max-steps", str(steps // 5 + 10), "--log-every", "5",
                 "--batch-size", str(T_BATCH), "--dtype", "bf16", "--vocab", str(T_VOCAB),
                 "--seq-len", str(T_SEQ), "--hidden", str(T_WIDTH), "--heads", str(T_HEADS),
                 "--layers", str(T_LAYERS), "--dataset-size", str(T_BATCH * gpus["n"] * 8),
                 "--checkpoint-every", "0"]
    rates = _rates(ctx, "kdist.workloads.fsdp", fsdp_args)
    fsdp, fsdp_share = _share(median(rates), rates, T_FLOPS_PER_SAMPLE, gpus, peak)
    return {"gpu.ddp_samples_per_s": ddp, "gpu.ddp_bf16_peak_fraction": ddp_share,
            "gpu.fsdp_bf16_samples_per_s": fsdp, "gpu.fsdp_bf16_peak_fraction": fsdp_share}
