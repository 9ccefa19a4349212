"""The reference: a minimal hand-written DDP script, as one would write it for torchrun.

    torchrun --nproc-per-node 2 bench/reference_ddp.py --max-steps 100

Same model, data, batch and optimizer as ``kdist.workloads.ddp`` (the MLP and
the synthetic teacher-labelled set are rebuilt here from the same seeds, not
imported, so no kdist code runs), DistributedSampler order sliced per step,
DDP with its default settings. Prints kdist's JSON step lines (docs/DESIGN.md, "JSON log lines") so
the benchmark reads both the same way. Standalone on purpose: no kdist imports.
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
from torch.utils.data.distributed import DistributedSampler


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
    x = torch.randn(args.dataset_size, args.features, generator=gen)
    y = (x @ torch.randn(args.features, args.classes, generator=gen)).argmax(dim=1)

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

    sampler = DistributedSampler(range(args.dataset_size), shuffle=True, seed=args.seed)
    per_epoch = len(sampler) // args.batch_size
    started, order = time.perf_counter(), None
    for step in range(args.max_steps):
        epoch, offset = divmod(step, per_epoch)
        if offset == 0:
            sampler.set_epoch(epoch)
            order = torch.tensor(list(sampler))
        idx = order[offset * args.batch_size:(offset + 1) * args.batch_size]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x[idx]), y[idx])
        loss.backward()
        opt.step()
        if (step + 1) % args.log_every == 0:
            now = time.perf_counter()
            rate = args.log_every * args.batch_size * world / (now - started)
            emit({"event": "step", "step": step + 1, "loss": loss.item(),
                  "samples_per_s": round(rate, 1), "rank": rank, "world_size": world})
            started = time.perf_counter()
    emit({"event": "done", "step": args.max_steps, "rank": rank, "world_size": world})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
