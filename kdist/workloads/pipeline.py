"""Pipeline-parallel training: ``python -m kdist.workloads.pipeline [FLAGS]``.

The MLP of ``kdist.workloads.common.mlp_blocks`` is cut into ``--stages``
contiguous stages (default: one per rank), one stage per rank, and driven by
``kdist.workloads.schedule`` with ``--microbatches`` micro-batches per step
under the GPipe or 1F1B schedule (``--schedule``): one message per micro-batch
and direction, into receive buffers each stage preallocates, with no shape
exchange (``torch.distributed.pipelining`` spent most of a CPU step on
per-message work; bench/README.md, "Pipeline"). When the world size
is a multiple of the stage count, the ranks form ``world / stages``
pipelines (DP x PP): rank r runs stage ``r % stages`` of pipeline
``r // stages``; each pipeline gets its own shard of the data
(``--batch-size`` per pipeline) and the stage's gradients are averaged over
the pipelines before the optimizer step. The loss and gradients equal those
of the unsplit model on the union of the pipelines' batches.

Every rank prints the JSON lines of docs/DESIGN.md; the loss (computed on the
last stage) is broadcast along the pipeline at log steps only. Each stage
checkpoints its own shard (``stage-S.pt``, written by pipeline 0) into the
same ``step-N/`` directory; resuming needs every stage's rank to see the
checkpoint directory (one shared volume, or one pod).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record

from kdist.shared import env as E
from kdist.workloads.checkpoint import Checkpointer
from kdist.workloads.common import (
    DEFAULT_PG_TIMEOUT_S,
    Dist,
    Meter,
    ShardedBatches,
    add_common_args,
    autocast,
    check_args,
    log_event,
    make_dataset,
    mlp_blocks,
    run_workload,
)
from kdist.workloads.loop import Saver, run_steps
from kdist.workloads.schedule import SCHEDULES, Boundary, StageRunner


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kdist.workloads.pipeline",
        description="Pipeline-parallel (optionally DP x PP) training of an MLP.",
    )
    add_common_args(parser)
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b",
                        help="pipeline schedule (default 1f1b)")
    parser.add_argument("--microbatches", type=int, default=4,
                        help="micro-batches per step; must divide --batch-size (default 4)")
    parser.add_argument("--stages", type=int, default=0,
                        help="pipeline stages; the world size must be a multiple (default: "
                             "the world size, i.e. one pipeline)")
    return parser


def stage_bounds(blocks: int, stages: int, stage: int) -> tuple[int, int]:
    """Blocks [start, stop) of ``stage`` when ``blocks`` are cut into ``stages`` near-even runs."""
    base, extra = divmod(blocks, stages)
    start = stage * base + min(stage, extra)
    return start, start + base + (1 if stage < extra else 0)


def split_model(args: argparse.Namespace, stages: int, stage: int,
                device: torch.device) -> tuple[nn.Sequential, Boundary | None, Boundary | None]:
    """This stage's part of the (seeded, so identical everywhere) MLP, on ``device``,
    and what it receives and sends per micro-batch (None at the pipeline's ends).

    The boundaries are worked out locally: one row through the blocks up to
    this stage's end under ``--dtype``'s autocast, so the preallocated buffers
    have the shape and dtype the neighbours send.
    """
    blocks = [b.to(device) for b in mlp_blocks(args)]
    start, stop = stage_bounds(len(blocks), stages, stage)
    micro = args.batch_size // args.microbatches
    probe = torch.zeros(1, args.features, device=device)
    inbound = outbound = None
    with torch.no_grad(), autocast(device, args.dtype)():
        for i, block in enumerate(blocks[:stop]):
            if i == start and stage > 0:
                inbound = Boundary((micro, *probe.shape[1:]), probe.dtype)
            probe = block(probe)
    if stage < stages - 1:
        outbound = Boundary((micro, *probe.shape[1:]), probe.dtype)
    return nn.Sequential(*blocks[start:stop]), inbound, outbound


def _group(group: object) -> dist.ProcessGroup:
    """A group this rank belongs to (new_group's other answers are for non-members)."""
    assert isinstance(group, dist.ProcessGroup)
    return group


class Layout:
    """Which pipeline and stage this rank is, and the groups it talks in."""

    def __init__(self, d: Dist, stages: int, timeout: timedelta):
        self.stages = stages
        self.replicas = d.world_size // stages
        self.stage = d.rank % stages
        self.replica = d.rank // stages
        self.first = self.stage == 0
        self.last = self.stage == stages - 1
        self.last_rank = self.replica * stages + stages - 1
        self.pp_group: dist.ProcessGroup | None = None
        self.dp_group: dist.ProcessGroup | None = None
        # new_group is collective: every rank creates every group, in one order.
        if self.replicas > 1:
            for r in range(self.replicas):
                group = dist.new_group(list(range(r * stages, (r + 1) * stages)), timeout=timeout)
                if r == self.replica:
                    self.pp_group = _group(group)
            for s in range(stages):
                ranks = [r * stages + s for r in range(self.replicas)]
                group = dist.new_group(ranks, timeout=timeout)
                if s == self.stage:
                    self.dp_group = _group(group)


def average_gradients(module: nn.Module, group, replicas: int) -> None:
    """All-reduce the stage's gradients over the pipelines, as one flat buffer."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= replicas
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace, world: int) -> int:
    stages = args.stages or world
    if stages < 1 or world % stages:
        parser.error(f"--stages {stages} does not divide the world size {world}")
    if stages > args.layers + 1:
        parser.error(f"--stages {stages} is more than the model's {args.layers + 1} blocks")
    if args.microbatches < 1 or args.batch_size % args.microbatches:
        parser.error(f"--microbatches {args.microbatches} must divide --batch-size")
    return stages


def train(args: argparse.Namespace, d: Dist, stages: int) -> None:
    timeout = timedelta(seconds=int(os.environ.get(E.PG_TIMEOUT, DEFAULT_PG_TIMEOUT_S)))
    lay = Layout(d, stages, timeout)
    x, y = (t.to(d.device) for t in make_dataset(args.seed, args.dataset_size,
                                                 args.features, args.classes))
    module, inbound, outbound = split_model(args, stages, lay.stage, d.device)
    opt = torch.optim.SGD(module.parameters(), lr=args.lr, momentum=args.momentum)
    shard = f"stage-{lay.stage}"
    ckpt = Checkpointer(args.checkpoint_dir, keep=args.keep_checkpoints) \
        if args.checkpoint_dir else None
    start, loss = 0, None
    loaded = ckpt.load([shard], device=d.device) if ckpt else None
    if loaded is not None:
        if loaded.meta.get("stages") != stages:
            sys.exit(f"kdist: checkpoint {loaded.name} has {loaded.meta.get('stages')} "
                     f"stages, this run {stages}")
        module.load_state_dict(loaded.shards[shard]["model"])
        opt.load_state_dict(loaded.shards[shard]["optimizer"])
        torch.set_rng_state(loaded.shards[shard]["rng"])
        start, loss = loaded.step, loaded.meta.get("loss")
        log_event("resume", step=start, checkpoint=loaded.name, rank=d.rank,
                  world_size=d.world_size)

    runner = StageRunner(
        module, schedule=args.schedule, stages=stages, stage=lay.stage,
        microbatches=args.microbatches, prev=None if lay.first else d.rank - 1,
        next=None if lay.last else d.rank + 1, inbound=inbound, outbound=outbound,
        group=lay.pp_group, device=d.device, loss_fn=F.cross_entropy,
        autocast=autocast(d.device, args.dtype))
    batches = ShardedBatches(args.dataset_size, args.batch_size, lay.replicas, lay.replica,
                             args.seed, d.device)
    meter = Meter(d.device, args.batch_size * lay.replicas)
    zero = torch.zeros((), device=d.device)

    def step(n: int) -> None:
        idx = batches.indices(n - 1)
        opt.zero_grad(set_to_none=True)
        loss = runner.step(x.index_select(0, idx) if lay.first else None,
                           y.index_select(0, idx) if lay.last else None)
        if lay.replicas > 1:
            average_gradients(module, lay.dp_group, lay.replicas)
        opt.step()
        meter.add(loss if loss is not None else zero)

    def read() -> tuple[float, float]:
        # Only the last stage knows the loss; meter.total is the interval's sum.
        dist.broadcast(meter.total, src=lay.last_rank, group=lay.pp_group)
        return meter.read()

    def shards(n: int) -> dict[str, Any]:
        state = {"model": module.state_dict(), "optimizer": opt.state_dict(),
                 "rng": torch.get_rng_state()}
        return {shard: state} if lay.replica == 0 else {}

    save = Saver(ckpt, d, meter, shards, lambda: {"stages": stages}) if ckpt else None
    run_steps(args, d, start=start, loss=loss, step=step, read=read,
              samples_per_step=meter.samples_per_step, save=save)


@record
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    return run_workload(lambda d: train(args, d, _check(parser, args, d.world_size)))


if __name__ == "__main__":
    sys.exit(main())
