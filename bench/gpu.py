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

FIGURES = [
    Spec("gpu.ddp_samples_per_s", "DDP with NCCL, all GPUs", "samples/s", KDIST, "(absolute)"),
    Spec("gpu.ddp_bf16_peak_fraction", "achieved model FLOP/s / GPUs' dense bf16 peak",
         "fraction", KDIST, "bf16 dense peak x GPUs (datasheet)"),
]


def _probe() -> dict:
    code = ("import json, torch; ok = torch.cuda.is_available(); print(json.dumps({'ok': ok, "
            "'n': torch.cuda.device_count() if ok else 0, "
            "'name': torch.cuda.get_device_name(0) if ok else ''}))")
    _, out, _ = run_cmd([PYTHON, "-c", code], env=clean_env(), timeout=120)
    return json.loads(out.strip().splitlines()[-1])


def _peak(name: str) -> float | None:
    """The peak for a device name such as "NVIDIA H100 80GB HBM3" or "NVIDIA A100-SXM4-80GB".

    Whole tokens only: a substring would take an L40 for an L4, an A10G for an
    A10 and a GB200 for a B200.
    """
    tokens = re.split(r"[^A-Za-z0-9]+", name.upper())
    found = [BF16_PEAK_TFLOPS[t] for t in tokens if t in BF16_PEAK_TFLOPS]
    return found[0] if found else None


def run(ctx: Ctx) -> dict[str, Measured]:
    gpus = _probe()
    if not gpus["ok"]:
        raise Skip("no GPU here (torch.cuda.is_available() is False)")
    steps = 60 if ctx.quick else 150
    args = ["--max-steps", str(steps), "--log-every", "10", "--batch-size", str(BATCH),
            "--hidden", str(HIDDEN), "--layers", str(LAYERS), "--features", str(FEATURES),
            "--classes", str(CLASSES), "--dataset-size", str(BATCH * gpus["n"] * 16),
            "--checkpoint-every", "0"]
    rates = []
    for r in range(ctx.rounds):
        env = clean_env(4, KDIST_NNODES="1", KDIST_NPROC_PER_NODE="auto",
                        KDIST_MASTER_ADDR="127.0.0.1", KDIST_MASTER_PORT=str(free_port()),
                        KDIST_DIST_BACKEND="nccl", KDIST_JOB_NAME="bench-gpu")
        run = run_json([PYTHON, "-m", "kdist.launch", "--module", "kdist.workloads.ddp", "--",
                        *args], env=env, timeout=600)
        rates.append(steady_rate(run, skip=2))
        ctx.say(f"    run {r + 1}/{ctx.rounds}: {rates[-1]:,.0f} samples/s")
    if not rates:
        raise BenchError("no runs")
    rate = median(rates)
    peak = _peak(gpus["name"])
    tflops = rate * 6 * PARAMS / 1e12
    note = f"{gpus['n']} x {gpus['name']}; {tflops:.1f} TFLOP/s achieved"
    fraction = Measured(None, skipped=f"no bf16 peak on file for {gpus['name']!r}; {note}") \
        if peak is None else Measured(tflops / (peak * gpus["n"]), [], note)
    return {"gpu.ddp_samples_per_s": Measured(rate, rates, note),
            "gpu.ddp_bf16_peak_fraction": fraction}
