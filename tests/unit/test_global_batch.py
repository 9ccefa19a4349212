"""An elastic job keeps its global batch at any size (issue 55, slice 3): the rule of
kdist.workloads.global_batch, pure, and the launcher's word on the full size."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from kdist.runtime.plan import resolve_env
from kdist.shared import env as E
from kdist.workloads import global_batch as G

# (per-rank batch, full world size): divisible by every smaller size and not.
CASES = [(4, 3), (5, 3), (256, 3), (3, 4), (1, 3), (7, 5), (2, 2)]


def shares(batch: int, full: int, world: int) -> list[list[G.MicroBatch]]:
    return [G.micro_batches(batch * full, world, r, batch) for r in range(world)]


@pytest.mark.parametrize(("batch", "full"), CASES)
def test_every_size_trains_on_the_whole_global_batch_once(batch, full):
    for world in range(1, full + 1):
        seen = [p for rank in shares(batch, full, world) for m in rank for p in m.positions]
        assert sorted(seen) == list(range(batch * full)), world


@pytest.mark.parametrize(("batch", "full"), CASES)
def test_the_averaged_gradient_is_the_full_batchs_mean_at_every_size(batch, full):
    """DDP averages the W ranks' gradients; a micro-batch's mean loss weighted w gives each
    of its n samples w / (W n) of the step's gradient: 1 / G for every sample, exactly."""
    total = batch * full
    for world in range(1, full + 1):
        for rank in shares(batch, full, world):
            for m in rank:
                per_sample = Fraction(m.weight).limit_denominator(10**6) / \
                    (world * len(m.positions))
                assert per_sample == Fraction(1, total), (world, m)


@pytest.mark.parametrize(("batch", "full"), CASES)
def test_micro_batches_stay_within_the_per_rank_batch_and_agree_in_number(batch, full):
    for world in range(1, full + 1):
        ranks = shares(batch, full, world)
        assert len({len(rank) for rank in ranks}) == 1, world  # one all-reduce, same step
        sizes = [len(m.positions) for rank in ranks for m in rank]
        assert min(sizes) >= 1, world  # an empty one's mean loss is NaN
        assert max(sizes) <= (batch if batch > 1 else 2), world


def test_at_full_size_each_rank_takes_what_distributed_sampler_gave_it():
    """Rank r of W takes positions r, r+W, ...: at full size one micro-batch of weight
    exactly 1, so an elastic job at full size trains as one that is not elastic."""
    for r in range(3):
        (only,) = G.micro_batches(12, 3, r, 4)
        assert only.positions == range(r, 12, 3) and only.weight == 1.0


def test_a_shrunk_rank_takes_a_larger_share_in_micro_batches():
    # 3 ranks of 4 -> 2 ranks: 6 samples each, in 2 micro-batches of 3 (at most 4)
    rank0 = G.micro_batches(12, 2, 0, 4)
    assert [list(m.positions) for m in rank0] == [[0, 2, 4], [6, 8, 10]]
    assert [m.weight for m in rank0] == [0.5, 0.5]
    # not divisible: 15 samples over 2 ranks, 8 and 7, each in 2 micro-batches
    assert [len(m.positions) for m in G.micro_batches(15, 2, 0, 5)] == [4, 4]
    assert [len(m.positions) for m in G.micro_batches(15, 2, 1, 5)] == [3, 4]


def test_an_epoch_has_the_same_steps_at_every_size():
    assert G.steps_per_epoch(2048, 768) == 2
    with pytest.raises(SystemExit, match="--dataset-size 100 is smaller than the global batch"):
        G.steps_per_epoch(100, 768)
    with pytest.raises(SystemExit, match="cannot be shared by 4 ranks"):
        G.micro_batches(3, 4, 0, 1)


def test_the_workers_of_an_elastic_job_learn_its_full_size_after_a_shrink():
    base = {"KDIST_NNODES": "3", "KDIST_NODE_RANK": "0", "KDIST_MASTER_ADDR": "h",
            "KDIST_NPROC_PER_NODE": "2", "KDIST_DIST_BACKEND": "gloo"}
    plan = resolve_env({**base, "KDIST_MIN_NODES": "2"})
    assert plan.worker_env({}, 2)[E.FULL_WORLD_SIZE] == "6"
    shrunk = dataclasses.replace(plan, nnodes=2)
    env = shrunk.worker_env({}, 2)
    assert (env[E.FULL_WORLD_SIZE], env[E.NNODES]) == ("6", "2")
    assert G.full_world_size(env) == 6
    # not elastic: the workloads keep their per-rank batch
    assert E.FULL_WORLD_SIZE not in resolve_env(base).worker_env({}, 2)
    assert G.full_world_size({}) is None
    with pytest.raises(SystemExit, match="KDIST_FULL_WORLD_SIZE=0 must be >= 1"):
        G.full_world_size({E.FULL_WORLD_SIZE: "0"})
