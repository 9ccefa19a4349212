"""An elastic job's batches as index tensors: ``kdist.workloads.global_batch``'s rule
applied to one epoch order after another."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from kdist.workloads import global_batch as G
from kdist.workloads.common import ShardedBatches

#: 0-based step -> this replica's micro-batches: (indices, weight of their mean loss).
Draw = Callable[[int], list[tuple[torch.Tensor, float]]]


def batches_for(args: argparse.Namespace, replicas: int, replica: int, device: torch.device,
                full_replicas: int | None) -> tuple[Draw, int]:
    """Replica `replica` of `replicas`' batches, and the job's samples per step.

    An elastic job (`full_replicas`: its data-parallel replicas at full size) keeps its
    global batch at any size (``kdist.workloads.global_batch``); any other keeps the
    per-replica batch, its DistributedSampler share, in one piece of weight 1.
    """
    if full_replicas is None:
        sharded = ShardedBatches(args.dataset_size, args.batch_size, replicas, replica,
                                 args.seed, device)
        return (lambda step: [(sharded.indices(step), 1.0)]), args.batch_size * replicas
    elastic = ElasticBatches(args.dataset_size, args.batch_size * full_replicas, replicas,
                             replica, args.seed, args.batch_size, device)
    return elastic.indices, elastic.global_batch


class ElasticBatches:
    """This rank's micro-batches of each step's global batch, at the world size of now.

    The epoch's order is DistributedSampler's permutation (``randperm`` seeded by
    ``seed + epoch``), made once per epoch; the position is a pure function of the step, so
    a gang resumed at step N at any size trains on what an uninterrupted one would.
    """

    def __init__(self, size: int, global_batch: int, replicas: int, replica: int, seed: int,
                 micro: int, device: torch.device):
        self.size, self.seed, self.device = size, seed, device
        self.global_batch = global_batch
        self.steps_per_epoch = G.steps_per_epoch(size, global_batch)
        self.micro = G.micro_batches(global_batch, replicas, replica, micro)
        self._epoch = -1
        self._order = torch.empty(0, dtype=torch.long)

    def indices(self, step: int) -> list[tuple[torch.Tensor, float]]:
        """(indices, weight of their mean loss) of each micro-batch of 0-based ``step``."""
        epoch, offset = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            gen = torch.Generator().manual_seed(self.seed + epoch)
            self._order = torch.randperm(self.size, generator=gen).to(self.device)
            self._epoch = epoch
        batch = self._order[offset * self.global_batch:(offset + 1) * self.global_batch]
        return [(batch[m.positions.start:m.positions.stop:m.positions.step], m.weight)
                for m in self.micro]


def share_mean(losses: list[tuple[torch.Tensor, int]]) -> torch.Tensor:
    """The mean loss over a share from its micro-batches' (mean loss, samples); one piece's
    own mean as it is (a job that is not elastic logs what it always did)."""
    if len(losses) == 1:
        return losses[0][0]
    return torch.stack([loss * n for loss, n in losses]).sum() / sum(n for _, n in losses)
