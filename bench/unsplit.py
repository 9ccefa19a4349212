"""The unsplit baseline of the pipeline benchmark: kdist's MLP whole, one process.

    python -m bench.unsplit --layers 5 --hidden 1024 --batch-size 256

The same blocks (`kdist.workloads.common.mlp_blocks`), data, batch order,
optimizer and loss as `kdist.workloads.pipeline`, run as one plain training
loop: no process group, no micro-batches. Prints kdist's JSON step lines.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch import nn

from kdist.workloads.common import (
    Meter,
    ShardedBatches,
    add_common_args,
    log_event,
    make_dataset,
    mlp_blocks,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.unsplit")
    add_common_args(parser)
    # > 1: the same step cut into micro-batches, gradients accumulated (no messages):
    # what micro-batching alone costs (bench figure pipeline.microbatch_cost).
    parser.add_argument("--microbatches", type=int, default=1)
    args = parser.parse_args(argv)
    device = torch.device("cpu")
    x, y = make_dataset(args.seed, args.dataset_size, args.features, args.classes)
    model = nn.Sequential(*mlp_blocks(args))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    batches = ShardedBatches(args.dataset_size, args.batch_size, 1, 0, args.seed, device)
    meter = Meter(device, args.batch_size)
    for step in range(1, args.max_steps + 1):
        idx = batches.indices(step - 1)
        opt.zero_grad(set_to_none=True)
        m = args.microbatches
        if m == 1:
            loss = F.cross_entropy(model(x.index_select(0, idx)), y.index_select(0, idx))
            loss.backward()
        else:
            loss = torch.zeros(())
            for xs, ys in zip(x.index_select(0, idx).chunk(m), y.index_select(0, idx).chunk(m),
                              strict=True):
                part = F.cross_entropy(model(xs), ys) / m
                part.backward()
                loss += part.detach()
        opt.step()
        meter.add(loss)
        if step % args.log_every == 0 or step == args.max_steps:
            mean, rate = meter.read()
            log_event("step", step=step, loss=mean, samples_per_s=rate, rank=0, world_size=1)
    log_event("done", step=args.max_steps, rank=0, world_size=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
