"""Functions `Client.train` runs on every rank in tests/dist/test_train.py (imported as a
top-level module, as a notebook imports the file beside it).

This directory is what travels (the function's file and its siblings): it
imports only what a training image has.
"""

from __future__ import annotations

import os

from helper import describe


def world_sum(scale: float, *, tag: str = "") -> dict:
    """Every rank adds its rank + 1 in one all_reduce; each rank returns what it saw."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        total = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(total)
        return {"rank": dist.get_rank(), "world": dist.get_world_size(),
                "sum": total.item() * scale, "node": int(os.environ["KDIST_NODE_RANK"]),
                "tag": tag, "helper": describe()}
    finally:
        dist.destroy_process_group()


def world_sum_left_alive() -> dict:
    """As most functions do: start the group, never destroy it (tests/dist/test_exit.py)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    return {"rank": dist.get_rank(), "sum": total.item()}


def fail_on(rank_to_fail: int) -> int:
    rank = int(os.environ["RANK"])
    if rank == rank_to_fail:
        raise ValueError(f"bad batch on rank {rank}")
    return rank


def shaped(blob: bool) -> object:
    """Rank 0's value in JSON's shapes (a tuple, NaN); with `blob`, bytes JSON cannot carry."""
    value = (int(os.environ["RANK"]), float("nan"), {"world": os.environ["WORLD_SIZE"]})
    return {"ok": value, "blob": b"raw"} if blob else value
