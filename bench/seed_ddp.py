"""The seed's approach, kept for comparison: DDP without a DistributedSampler,
batches made by a DataLoader over a Python list of (sample, target) pairs.

    torchrun --nproc-per-node 2 bench/seed_ddp.py --max-steps 100

Every rank walks the whole data set (nothing shards it), so two ranks do the
same samples twice: the figure that matters is *unique* samples per second,
``unique_samples_per_s`` = one rank's batch / step time. ``samples_per_s`` is
what the job computes (batch x world / step time), for comparison. Same model,
data, batch and optimizer as ``kdist.workloads.ddp``; no kdist imports.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader


def emit(record: dict) -> None:
    """One JSON line in one write: ranks share the launcher's stdout."""
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dataset-size", type=int, default=65536)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    gen = torch.Generator().manual_seed(args.seed + 1)
    dataset = torch.randn(args.dataset_size, args.features, generator=gen)
    targets = (dataset @ torch.randn(args.features, args.classes, generator=gen)).argmax(dim=1)

    torch.manual_seed(args.seed)
    widths = [args.features] + [args.hidden] * args.layers
    model = nn.Sequential(
        *[nn.Sequential(nn.Linear(widths[i], widths[i + 1]), nn.ReLU())
          for i in range(args.layers)],
        nn.Linear(widths[-1], args.classes),
    )
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(list(zip(dataset, targets, strict=True)), batch_size=args.batch_size,
                        shuffle=True)

    step, started = 0, time.perf_counter()
    while step < args.max_steps:
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(xb), yb)
            loss.backward()
            opt.step()
            step += 1
            if step % args.log_every == 0:
                elapsed = time.perf_counter() - started
                unique = args.log_every * args.batch_size / elapsed
                emit({"event": "step", "step": step, "loss": loss.item(),
                      "samples_per_s": round(unique * world, 1),
                      "unique_samples_per_s": round(unique, 1), "rank": rank,
                      "world_size": world})
                started = time.perf_counter()
            if step == args.max_steps:
                break
    emit({"event": "done", "step": step, "rank": rank, "world_size": world})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
