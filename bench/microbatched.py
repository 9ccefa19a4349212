"""The unsplit baseline cut into micro-batches, in one process: what micro-batching
alone costs, with no pipeline and no messages.

    python -m bench.microbatched --layers 5 --hidden 1024 --batch-size 256 --microbatches 4

The same model, data, batch order and optimizer as ``bench.unsplit``; each step
runs ``--microbatches`` forwards and backwards of batch/m samples and
accumulates their gradients (loss / m each), as one pipeline stage does for its
part of the model. Its samples/s over ``bench.unsplit``'s is the work-per-sample
penalty of small micro-batches on this CPU, which no schedule can win back.
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
    parser = argparse.ArgumentParser(prog="python -m bench.microbatched")
    add_common_args(parser)
    parser.add_argument("--microbatches", type=int, default=4)
    args = parser.parse_args(argv)
    device = torch.device("cpu")
    x, y = make_dataset(args.seed, args.dataset_size, args.features, args.classes)
    model = nn.Sequential(*mlp_blocks(args))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    batches = ShardedBatches(args.dataset_size, args.batch_size, 1, 0, args.seed, device)
    meter = Meter(device, args.batch_size)
    m = args.microbatches
    for step in range(1, args.max_steps + 1):
        idx = batches.indices(step - 1)
        opt.zero_grad(set_to_none=True)
        total = torch.zeros(())
        for xs, ys in zip(x.index_select(0, idx).chunk(m), y.index_select(0, idx).chunk(m),
                          strict=True):
            loss = F.cross_entropy(model(xs), ys) / m
            loss.backward()
            total += loss.detach()
        opt.step()
        meter.add(total)
        if step % args.log_every == 0 or step == args.max_steps:
            mean, rate = meter.read()
            log_event("step", step=step, loss=mean, samples_per_s=rate, rank=0, world_size=1)
    log_event("done", step=args.max_steps, rank=0, world_size=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
