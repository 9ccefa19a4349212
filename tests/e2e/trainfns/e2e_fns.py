"""Functions tests/e2e/test_train_fn.py hands to `Client.train`: this directory is what
travels to the pods (as ConfigMaps), imported there as a top-level module."""

from __future__ import annotations

import os
import socket


def gather(scale: int) -> dict:
    """Every rank all_reduces rank + 1 over gloo; rank 0's view comes back."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        total = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(total)
        return {"rank": dist.get_rank(), "world": dist.get_world_size(),
                "sum": total.item() * scale, "node": int(os.environ["KDIST_NODE_RANK"]),
                "host": socket.gethostname(), "cwd": os.getcwd()}
    finally:
        dist.destroy_process_group()


def fail_on(rank_to_fail: int) -> int:
    rank = int(os.environ["RANK"])
    if rank == rank_to_fail:
        raise ValueError(f"bad batch on rank {rank}")
    return rank
