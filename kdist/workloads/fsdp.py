"""Sharded data parallel (FSDP2), optionally x tensor parallel: ``python -m kdist.workloads.fsdp``.

A decoder-only transformer (``kdist.workloads.transformer``; sizes by flags)
on synthetic tokens, sharded with ``fully_shard`` per block and at the root,
so each rank holds 1/N of the parameters, gradients and AdamW state and
gathers one block's parameters at a time. ``--tp T`` makes a 2-D mesh
(world / T data-parallel groups x T-way tensor parallel; consecutive ranks
form a TP group, so T dividing the processes per node keeps it in a node):
FSDP shards over the data-parallel dimension, TP splits each block's
attention heads and MLP. ``--batch-size`` is per data-parallel replica: N
replicas at batch B follow the trajectory of one process at batch N x B; an
elastic job keeps its global batch at any size (``kdist.workloads.global_batch``).

``--dtype bf16`` is mixed precision (``MixedPrecisionPolicy``): parameters
gathered and computed in bf16, gradients reduced in bf16 on GPUs (fp32 over
gloo, whose bf16 sums are slow), fp32 master weights in the optimizer.
``--activation-checkpointing`` recomputes each block's activations in
backward. NCCL on GPUs, gloo on CPUs.

Checkpoints are DCP's (``torch.distributed.checkpoint``): every rank writes
its own shards into the same ``step-N/`` (atomic, verified, as
``kdist.workloads.checkpoint`` does), and a run at another world size or
``--tp`` resumes from them exactly (DCP reshards). Every rank must see the
checkpoint directory (a shared volume, or one pod). JSON lines, preemption
and the fault hook are the shared step loop's (``kdist.workloads.loop``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.elastic.multiprocessing.errors import record

from kdist.workloads import torchapi
from kdist.workloads.batches import batches_for, share_mean
from kdist.workloads.checkpoint import Checkpointer
from kdist.workloads.common import (
    DTYPES,
    Dist,
    Meter,
    add_loop_args,
    check_args,
    log_event,
    run_workload,
)
from kdist.workloads.global_batch import full_world_size
from kdist.workloads.loop import Saver, run_steps
from kdist.workloads.transformer import (
    TP_PLAN,
    add_model_args,
    build_model,
    check_model_args,
    loss_of,
    make_tokens,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kdist.workloads.fsdp",
        description="FSDP2 (optionally x tensor parallel) training of a small transformer.",
    )
    add_loop_args(parser)
    add_model_args(parser)
    add = parser.add_argument
    add("--tp", type=int, default=1,
        help="tensor-parallel degree: must divide the world size and --heads (default 1)")
    add("--activation-checkpointing", action="store_true",
        help="recompute each block's activations in backward instead of keeping them")
    add("--dtype", choices=sorted(DTYPES), default="fp32",
        help="bf16: mixed precision (bf16 parameters and compute, fp32 master weights "
             "and optimizer state) (default fp32)")
    add("--weight-decay", type=float, default=0.0, help="AdamW weight decay (default 0)")
    parser.set_defaults(lr=1e-3, batch_size=16, dataset_size=8192)
    return parser


def check_layout(parser: argparse.ArgumentParser, args: argparse.Namespace, world: int) -> int:
    """The data-parallel size for ``args.tp`` at ``world`` ranks."""
    if args.tp < 1 or world % args.tp:
        parser.error(f"--tp {args.tp} does not divide the world size {world}")
    if args.heads % args.tp or args.ffn % args.tp:
        parser.error(f"--tp {args.tp} must divide --heads {args.heads} and --ffn {args.ffn}")
    return world // args.tp


def setup(args: argparse.Namespace, d: Dist, dp: int) -> tuple[torch.nn.Module,
                                                               torch.optim.Optimizer]:
    """The sharded model and its optimizer, on this rank's device."""
    model = build_model(args)
    for block in model.blocks:
        block.checkpointed = args.activation_checkpointing
    model.to(d.device)
    low = DTYPES[args.dtype]
    # gloo sums bf16 on the CPU one element at a time: reduce in fp32 there.
    reduce = low if d.device.type == "cuda" else None
    torchapi.shard(model, list(model.blocks), torchapi.mesh(d.device.type, dp, args.tp),
                   TP_PLAN, torchapi.mixed_precision(low, reduce))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(args.momentum, 0.999),
                            weight_decay=args.weight_decay)
    return model, opt


def train(args: argparse.Namespace, d: Dist, dp: int) -> None:
    x, y = (t.to(d.device) for t in make_tokens(args.seed, args.dataset_size, args.seq_len,
                                                args.vocab))
    model, opt = setup(args, d, dp)
    ckpt = Checkpointer(args.checkpoint_dir, keep=args.keep_checkpoints) \
        if args.checkpoint_dir else None
    start, loss = 0, None
    if ckpt is not None:
        ckpt.require_shared(d.device)
        state = torchapi.train_state(model, opt)
        loaded = ckpt.load_dcp(lambda path: torchapi.load(state, path), device=d.device)
        if loaded is None:
            torchapi.forget_optimizer_state(opt)
        else:
            torchapi.load_train_state(model, opt, state)
            start, loss = loaded.step, loaded.meta.get("loss")
            log_event("resume", step=start, checkpoint=loaded.name, rank=d.rank,
                      world_size=d.world_size, saved_world_size=loaded.meta.get("world_size"))
    # A TP group shares one replica's batch.
    full = full_world_size()
    draw, samples_per_step = batches_for(args, dp, d.rank // args.tp, d.device,
                                         None if full is None else full // args.tp)
    meter = Meter(d.device, samples_per_step)

    def step(n: int) -> None:
        losses = []
        # An elastic job's share of the global batch in micro-batches, each backward
        # reducing its (weighted) gradients into the sharded ones, which accumulate.
        for idx, weight in draw(n - 1):
            part = loss_of(model, x.index_select(0, idx), y.index_select(0, idx))
            (part if weight == 1.0 else part * weight).backward()
            losses.append((part.detach(), len(idx)))
        opt.step()
        opt.zero_grad(set_to_none=True)
        meter.add(share_mean(losses))

    save = DcpSaver(ckpt, d, meter, lambda _: {},
                    lambda: {"world_size": d.world_size, "tp": args.tp},
                    state=lambda: torchapi.train_state(model, opt)) if ckpt else None
    run_steps(args, d, start=start, loss=loss, step=step, read=meter.read,
              samples_per_step=meter.samples_per_step, save=save)


@dataclass
class DcpSaver(Saver):
    """The loop's saver for DCP checkpoints: every rank writes its own shards."""

    state: Callable[[], dict[str, Any]] = dict

    def write(self, step: int, meta: dict[str, Any]) -> Path:
        state = self.state()
        return self.ckpt.save_dcp(step, lambda path: torchapi.save(state, path), meta)


@record
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    check_model_args(parser, args)
    return run_workload(lambda d: train(args, d, check_layout(parser, args, d.world_size)))


if __name__ == "__main__":
    sys.exit(main())
