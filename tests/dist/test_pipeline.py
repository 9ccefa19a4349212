"""The pipeline workload equals the unsplit model: loss, gradients, parameters."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from disttools import TINY, assert_ok, run_job
from torch import nn

from kdist.workloads.common import ShardedBatches, make_dataset, mlp_blocks
from kdist.workloads.pipeline import build_parser, stage_bounds

LR = 1.0  # with momentum 0, one step moves each parameter by exactly its gradient
FLAGS = [*TINY, "--batch-size", "16", "--microbatches", "4", "--lr", str(LR), "--momentum", "0",
         "--seed", "11", "--max-steps", "2", "--log-every", "1", "--checkpoint-every", "1",
         "--keep-checkpoints", "0"]


def reference(flags: list[str], replicas: int, steps: int):
    """The unsplit model on the union of the pipelines' batches: params, losses, grads."""
    args = build_parser().parse_args(flags)
    model = nn.Sequential(*mlp_blocks(args))
    x, y = make_dataset(args.seed, args.dataset_size, args.features, args.classes)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    cpu = torch.device("cpu")
    shards = [ShardedBatches(args.dataset_size, args.batch_size, replicas, r, args.seed, cpu)
              for r in range(replicas)]
    start = {k: v.clone() for k, v in model.state_dict().items()}
    losses, grads = [], []
    for step in range(steps):
        idx = torch.cat([s.indices(step) for s in shards])
        opt.zero_grad()
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        losses.append(loss.item())
        grads.append({k: p.grad.clone() for k, p in model.named_parameters()})
        opt.step()
    return start, losses, grads, model.state_dict()


def stitched(ckpt: Path, step: int, stages: int, blocks: int) -> dict[str, torch.Tensor]:
    """The stage shards of ``step-N`` as one state dict with the unsplit model's keys."""
    full = {}
    for stage in range(stages):
        first, _ = stage_bounds(blocks, stages, stage)
        shard = torch.load(ckpt / f"step-{step}" / f"stage-{stage}.pt", weights_only=True)
        for key, value in shard["model"].items():
            index, rest = key.split(".", 1)
            full[f"{int(index) + first}.{rest}"] = value
    return full


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("stages", "schedule", "nodes", "procs"),
    # 2 and 4 stages under both schedules; "dp2" is 2 pipelines of 2 stages (DP x PP).
    [(2, "gpipe", 1, 2), (2, "1f1b", 2, 2), (4, "gpipe", 1, 4), (4, "1f1b", 1, 4)],
    ids=["2-gpipe", "dp2-2-1f1b-2nodes", "4-gpipe", "4-1f1b"],
)
def test_pipeline_equals_unsplit_model(tmp_path, stages, schedule, nodes, procs):
    world = nodes * procs
    replicas = world // stages
    flags = [*FLAGS, "--schedule", schedule, "--stages", str(stages)]
    run = run_job(["--module", "kdist.workloads.pipeline", "--", *flags,
                   "--checkpoint-dir", str(tmp_path)], nodes=nodes, procs=procs)
    assert_ok(run)
    start, losses, grads, final = reference(flags, replicas, steps=2)
    blocks = 1 + int(flags[flags.index("--layers") + 1])

    steps = run.events("step")
    assert {e["rank"] for e in steps} == set(range(world))
    # Each pipeline logs the loss of its own batch; their mean is the unsplit loss.
    for step, expected in enumerate(losses, start=1):
        per_replica = {e["rank"] // stages: e["loss"] for e in steps if e["step"] == step}
        assert len(per_replica) == replicas
        assert sum(per_replica.values()) / replicas == pytest.approx(expected, abs=1e-5)

    after_one = stitched(tmp_path, 1, stages, blocks)
    assert after_one.keys() == start.keys()
    for key in start:
        grad = (start[key] - after_one[key]) / LR
        torch.testing.assert_close(grad, grads[0][key], atol=2e-5, rtol=1e-4, msg=key)
    after_two = stitched(tmp_path, 2, stages, blocks)
    for key in final:
        torch.testing.assert_close(after_two[key], final[key], atol=2e-5, rtol=1e-4, msg=key)
