"""Data-parallel training: ``python -m kdist.workloads.ddp [FLAGS]``.

An MLP classifier on a synthetic, learnable data set made from ``--seed``
(no downloads), wrapped in DistributedDataParallel; a DistributedSampler
shards each epoch across ranks; ``--batch-size`` is per rank, so one process
with batch 2B follows the same trajectory as two ranks with batch B. An elastic
job (``KDIST_FULL_WORLD_SIZE`` set) keeps its global batch, ``--batch-size`` x
its full world size, at whatever size it trains (``kdist.workloads.global_batch``).
gloo on CPUs, NCCL on GPUs (each worker on its ``LOCAL_RANK``'s GPU).

Every rank prints JSON lines: ``step`` (mean loss of this rank's batches
since the last line; ``samples_per_s`` = the whole job's samples per second
over that interval), ``checkpoint`` (rank 0), ``resume`` and ``done``.

With a checkpoint directory (``$KDIST_CHECKPOINT_DIR`` or
``--checkpoint-dir``), rank 0 saves model, optimizer, RNG and step every
``--checkpoint-every`` steps and at the end; on start rank 0 loads the newest
verified checkpoint and hands it to every rank, so resuming is exact (same
final parameters as an uninterrupted run) and works even when only rank 0's
pod can see the directory.

After each step each rank also keeps its newest state in memory (``memory``; off with
``--no-memory-copy``): a restarted gang resumes from the newest step any rank holds,
sent to the ranks that lack it (a spare, a replaced pod), when it is newer than the
newest checkpoint, so at most the step in flight is lost.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel

from kdist.workloads.batches import batches_for, share_mean
from kdist.workloads.checkpoint import Checkpointer
from kdist.workloads.common import (
    Dist,
    Meter,
    add_common_args,
    autocast,
    check_args,
    log_event,
    make_dataset,
    mlp_blocks,
    run_workload,
)
from kdist.workloads.global_batch import full_world_size
from kdist.workloads.loop import Saver, run_steps
from kdist.workloads.memory import memory_copy

SHARD = "state"
# DDP's own default. Its first bucket is capped at 1 MB anyway, so the default MLP
# (3.3 MB of gradients) makes 2 buckets and the first all-reduce overlaps backward.
# Smaller buckets measured slower on gloo over 2 shared cores (bench/README.md, 1).
BUCKET_CAP_MB = 25.0
COMPRESSION: dict[str, Callable[..., Any] | None] = {
    "none": None,
    "bf16": default_hooks.bf16_compress_hook,
    "fp16": default_hooks.fp16_compress_hook,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kdist.workloads.ddp",
        description="DistributedDataParallel training of an MLP on a synthetic data set.",
    )
    add_common_args(parser)
    parser.add_argument("--bucket-cap-mb", type=float, default=BUCKET_CAP_MB,
                        help="DDP gradient bucket size in MB: each bucket's all-reduce starts "
                             "as soon as backward has produced its gradients, so smaller "
                             f"buckets overlap more of it (default {BUCKET_CAP_MB})")
    parser.add_argument("--grad-compression", choices=sorted(COMPRESSION), default="none",
                        help="all-reduce gradients in bf16 or fp16 (half the bytes; a "
                             "DDP communication hook) and average them back in fp32 "
                             "(default none)")
    parser.add_argument("--no-memory-copy", action="store_true",
                        help="keep no copy of each step's state in memory (/dev/shm): a "
                             "restart then resumes from the newest checkpoint, not from "
                             "the newest step a surviving rank holds")
    return parser


def wrap(model: nn.Module, args: argparse.Namespace, d: Dist) -> DistributedDataParallel:
    """DDP for ``model`` with the overlap settings and the compression hook of ``args``.

    ``gradient_as_bucket_view``: gradients live in the buckets (no copy into
    them); the buckets, filled in backward's order, are all-reduced one by one
    while backward continues.
    """
    ddp = DistributedDataParallel(
        model,
        device_ids=[d.device.index] if d.device.type == "cuda" else None,
        bucket_cap_mb=args.bucket_cap_mb,
        gradient_as_bucket_view=True,
    )
    hook = COMPRESSION[args.grad_compression]
    if hook is not None:
        try:
            ddp.register_comm_hook(None, hook)
        except TypeError as e:  # bf16's hook wants a torch built with NCCL (CPU builds lack it)
            raise SystemExit(f"--grad-compression {args.grad_compression}: torch "
                             f"{torch.__version__} refuses it ({e}); use fp16 or none") from None
    return ddp


def build_model(args: argparse.Namespace) -> nn.Sequential:
    """The model every rank starts from (the same for every rank, seeded)."""
    return nn.Sequential(*mlp_blocks(args))


def _resume(
    ckpt: Checkpointer, d: Dist, model: nn.Module, opt: torch.optim.Optimizer
) -> tuple[int, float | None]:
    """Load the newest checkpoint on rank 0 and give it to every rank: (step, loss)."""
    loaded = ckpt.load([SHARD] if d.rank == 0 else [], device=d.device)
    if loaded is None:
        return 0, None
    box = [loaded.shards.get(SHARD)]
    dist.broadcast_object_list(box, src=0)
    state: dict[str, Any] = box[0] or {}
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    log_event("resume", step=loaded.step, checkpoint=loaded.name,
              source=f"checkpoint {loaded.name}", rank=d.rank, world_size=d.world_size)
    return loaded.step, loaded.meta.get("loss")


def train(args: argparse.Namespace, d: Dist) -> None:
    x, y = (t.to(d.device) for t in make_dataset(args.seed, args.dataset_size,
                                                 args.features, args.classes))
    model = build_model(args).to(d.device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    ckpt = Checkpointer(args.checkpoint_dir, keep=args.keep_checkpoints) \
        if args.checkpoint_dir else None
    memory = memory_copy(args, d, model, opt)
    resumed = memory.resume(ckpt.newest_step() if ckpt and d.rank == 0 else None) \
        if memory else None
    start, loss = resumed or (_resume(ckpt, d, model, opt) if ckpt else (0, None))
    ddp = wrap(model, args, d)
    forward_context = autocast(d.device, args.dtype)
    draw, samples_per_step = batches_for(args, d.world_size, d.rank, d.device,
                                         full_world_size())
    loss_fn = nn.CrossEntropyLoss()
    meter = Meter(d.device, samples_per_step)

    def step(n: int) -> None:
        parts = draw(n - 1)
        opt.zero_grad(set_to_none=True)
        losses = []
        for i, (idx, weight) in enumerate(parts):
            # An elastic job's share of the global batch in micro-batches: the gradients
            # are all-reduced once, after the last one's backward.
            with contextlib.nullcontext() if i == len(parts) - 1 else ddp.no_sync():
                with forward_context():
                    part = loss_fn(ddp(x.index_select(0, idx)), y.index_select(0, idx))
                (part if weight == 1.0 else part * weight).backward()
            losses.append((part.detach(), len(idx)))
        opt.step()
        meter.add(share_mean(losses))

    def shards(n: int) -> dict[str, Any]:
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(),
                 "rng": torch.get_rng_state(), "step": n}
        return {SHARD: state} if d.rank == 0 else {}

    save = Saver(ckpt, d, meter, shards) if ckpt else None
    run_steps(args, d, start=start, loss=loss, step=step, read=meter.read,
              samples_per_step=meter.samples_per_step, save=save,
              remember=memory.remember if memory else None, start_saved=resumed is None)
    if memory is not None:
        memory.close()


@record
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    return run_workload(lambda d: train(args, d))


if __name__ == "__main__":
    sys.exit(main())
