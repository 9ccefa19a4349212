"""The global batch an elastic job keeps whatever its size (issue 55, slice 3).

An elastic job (``spec.minNodes`` below ``spec.nodes``) may train on fewer ranks than it
started with. Keeping each rank's ``--batch-size`` would shrink the global batch with the
gang, and the loss curve would no longer be that of the job. Instead the job has one global
batch of ``G = --batch-size x`` its full world size (``KDIST_FULL_WORLD_SIZE``, the size at
``spec.nodes``), drawn per step from one order per epoch that does not depend on the world
size, and each of the W ranks of the moment trains on its share:

- step ``s`` of an epoch is the positions ``s*G .. s*G+G-1`` of that epoch's order (a
  permutation of the data set seeded by ``seed + epoch``: DistributedSampler's), and an
  epoch has ``dataset_size // G`` steps whatever W;
- rank ``r`` of W takes the positions ``r, r+W, r+2W, ...`` of the step's G (at the full
  size that is exactly what DistributedSampler gives it, so an elastic job at full size
  trains as a job that is not elastic);
- its share, ``ceil(G/W)`` or one fewer samples, runs in the same number of micro-batches on
  every rank, each of at most ``--batch-size`` samples (so a rank never holds more
  activations than at the full size; one more at ``--batch-size 1``), the gradients
  accumulated and all-reduced once;
- micro-batch ``m`` of ``n_m`` samples has its mean loss weighted by ``n_m * W / G``: DDP
  averages the W ranks' gradients, so the gradient is ``(1/G)`` times the sum over the
  global batch's samples' gradients, the full batch's mean, at any W (up to the order of
  float sums). At the full size the weight is exactly 1.

This module is the rule, torch-free; ``kdist.workloads.batches.ElasticBatches`` applies it
to tensors.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from kdist.shared import env as E


@dataclass(frozen=True)
class MicroBatch:
    """Positions of a step's global batch (0 .. G-1) and the weight of their mean loss."""

    positions: range
    weight: float


def full_world_size(environ: Mapping[str, str] = os.environ) -> int | None:
    """The elastic job's world size at full size; None for a job that is not elastic."""
    value = environ.get(E.FULL_WORLD_SIZE, "").strip()
    if not value:
        return None
    size = int(value)
    if size < 1:
        raise SystemExit(f"kdist: {E.FULL_WORLD_SIZE}={value} must be >= 1")
    return size


def micro_batches(global_batch: int, replicas: int, replica: int, micro: int
                  ) -> list[MicroBatch]:
    """Rank `replica` of `replicas`' micro-batches of one step of `global_batch` samples,
    each of at most `micro` samples (every rank gets the same number of them)."""
    if not 0 <= replica < replicas:
        raise ValueError(f"replica {replica} is not one of {replicas}")
    if replicas > global_batch:
        raise SystemExit(f"kdist: the global batch of {global_batch} samples cannot be "
                         f"shared by {replicas} ranks")
    # No rank may get an empty micro-batch (its mean loss is NaN): at --batch-size 1 with
    # shares of n and n+1 samples, the larger shares take one micro-batch of 2.
    count = min(math.ceil(math.ceil(global_batch / replicas) / micro),
                global_batch // replicas)
    share = range(replica, global_batch, replicas)
    out = []
    for m in range(count):
        part = share[len(share) * m // count:len(share) * (m + 1) // count]
        out.append(MicroBatch(part, len(part) * replicas / global_batch))
    return out


def steps_per_epoch(dataset_size: int, global_batch: int) -> int:
    """Whole global batches in the data set: the same at every world size."""
    steps = dataset_size // global_batch
    if steps == 0:
        raise SystemExit(f"kdist: --dataset-size {dataset_size} is smaller than the global "
                         f"batch of {global_batch} samples")
    return steps
