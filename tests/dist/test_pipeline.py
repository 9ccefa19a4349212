"""The pipeline workload equals the unsplit model: loss, gradients, parameters; and its
schedules send what they should: one message per micro-batch and direction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from disttools import TINY, assert_ok, free_port, run_job
from torch import nn

from kdist.workloads.common import ShardedBatches, autocast, make_dataset, mlp_blocks
from kdist.workloads.pipeline import build_parser, split_model, stage_bounds
from kdist.workloads.schedule import Boundary, StageRunner, WeightGrads, actions

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


@pytest.mark.parametrize(("schedule", "stage", "expected"), [
    ("1f1b", 0, "F0 F1 B0 F2 B1 F3 B2 B3"),
    ("1f1b", 1, "F0 B0 F1 B1 F2 B2 F3 B3"),
    ("gpipe", 0, "F0 F1 F2 F3 B0 B1 B2 B3"),
    ("gpipe", 1, "F0 F1 F2 F3 B0 B1 B2 B3"),
])
def test_schedule_orders(schedule, stage, expected):
    assert " ".join(f"{k}{i}" for k, i in actions(schedule, 2, stage, 4)) == expected


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_1f1b_holds_at_most_stages_minus_stage_micro_batches(stages):
    for stage in range(stages):
        held = peak = 0
        for kind, _ in actions("1f1b", stages, stage, 8):
            held += 1 if kind == "F" else -1
            peak = max(peak, held)
        assert peak == stages - stage


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_weight_gradients_apart_from_backward_equal_autograd(dtype):
    args = build_parser().parse_args([*TINY, "--dtype", dtype])
    plain, split = (nn.Sequential(*mlp_blocks(args)) for _ in range(2))
    weights = WeightGrads(split)
    x, y = make_dataset(3, 32, args.features, args.classes)
    context = autocast(torch.device("cpu"), dtype)
    for model in (plain, split):
        for xs, ys in zip(x.chunk(4), y.chunk(4), strict=True):
            with context():
                loss = F.cross_entropy(model(xs), ys) / 4
            loss.backward()
    assert weights.pending and all(p.grad is None for p in split.parameters())
    weights.all()
    tol = {"atol": 1e-6, "rtol": 1e-5} if dtype == "fp32" else {"atol": 1e-2, "rtol": 1e-2}
    for (name, a), b in zip(plain.named_parameters(), split.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, msg=name, **tol)


def test_bf16_stages_exchange_bf16_activations():
    args = build_parser().parse_args([*TINY, "--batch-size", "16", "--dtype", "bf16"])
    _, inbound, outbound = split_model(args, 2, 1, torch.device("cpu"))
    assert outbound is None and inbound == Boundary((4, 32), torch.bfloat16)
    _, inbound, outbound = split_model(build_parser().parse_args(TINY), 2, 0, torch.device("cpu"))
    assert inbound is None and outbound == Boundary((64, 32), torch.float32)


def _one_stage(rank: int, port: int, flags: list[str], out: str) -> None:
    """A 2-stage pipeline's stage ``rank``, 2 steps, with every send and receive counted."""
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    sent, received = [], []
    isend, irecv = dist.isend, dist.irecv

    def counted_isend(t, *a, **k):
        sent.append([list(t.shape), str(t.dtype)])
        return isend(t, *a, **k)

    def counted_irecv(t, *a, **k):
        received.append(list(t.shape))
        return irecv(t, *a, **k)

    dist.isend, dist.irecv = counted_isend, counted_irecv
    args = build_parser().parse_args(flags)
    cpu = torch.device("cpu")
    module, inbound, outbound = split_model(args, 2, rank, cpu)
    runner = StageRunner(module, schedule=args.schedule, stages=2, stage=rank, microbatches=4,
                         prev=None if rank == 0 else 0, next=1 if rank == 0 else None,
                         inbound=inbound, outbound=outbound, group=None, device=cpu,
                         loss_fn=F.cross_entropy, autocast=autocast(cpu, args.dtype))
    x, y = make_dataset(0, 64, args.features, args.classes)
    for step in range(2):
        runner.step(x[step * 16:(step + 1) * 16] if rank == 0 else None,
                    y[step * 16:(step + 1) * 16] if rank == 1 else None)
    Path(out, f"{rank}.json").write_text(json.dumps(
        {"sent": sent, "received": received, "messages": runner.messages}))
    dist.destroy_process_group()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("schedule", "dtype"), [("1f1b", "fp32"), ("gpipe", "bf16")])
def test_a_step_sends_one_message_per_micro_batch_and_direction(tmp_path, schedule, dtype):
    flags = [*TINY, "--batch-size", "16", "--microbatches", "4", "--schedule", schedule,
             "--dtype", dtype]
    mp.start_processes(_one_stage, args=(free_port(), flags, str(tmp_path)), nprocs=2,
                       start_method="spawn")
    first, last = (json.loads((tmp_path / f"{r}.json").read_text()) for r in range(2))
    wire = "torch.bfloat16" if dtype == "bf16" else "torch.float32"
    # 2 steps x 4 micro-batches: activations forward, their gradients back, nothing else.
    assert first["sent"] == [[[4, 32], wire]] * 8 and first["messages"] == 8
    assert last["sent"] == [[[4, 32], wire]] * 8 and last["messages"] == 8
    assert first["received"] == last["received"] == [[4, 32]] * 8
