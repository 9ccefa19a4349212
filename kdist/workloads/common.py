"""What both workloads share: flags, process-group setup, JSON log lines,
a deterministic synthetic data set, the MLP, and sharded batch indices."""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data.distributed import DistributedSampler

DEFAULT_PG_TIMEOUT_S = 300
# Test hook: "RANK:STEP" makes that rank SIGKILL itself after that step, on a
# job's first attempt only (TORCHELASTIC_RESTART_COUNT=0).
FAULT_ENV = "KDIST_FAULT_KILL_AT"


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """The flags every kdist workload takes (DESIGN.md) plus the model/data shape."""
    add = parser.add_argument
    add("--max-steps", type=int, default=200, help="optimizer steps in total (default 200)")
    add("--batch-size", type=int, default=256,
        help="samples per step per data-parallel replica (default 256)")
    add("--lr", type=float, default=0.1, help="SGD learning rate (default 0.1)")
    add("--momentum", type=float, default=0.9, help="SGD momentum (default 0.9)")
    add("--seed", type=int, default=0, help="seeds the model, the data and the sampler")
    add("--log-every", type=int, default=20, help="one JSON step line per N steps")
    add("--checkpoint-every", type=int, default=100,
        help="checkpoint every N steps, and at the end; 0 = only at the end")
    add("--checkpoint-dir", default=os.environ.get("KDIST_CHECKPOINT_DIR") or None,
        help="default: $KDIST_CHECKPOINT_DIR; no checkpoints when unset")
    add("--keep-checkpoints", type=int, default=2, help="complete checkpoints kept; 0 = all")
    add("--dataset-size", type=int, default=65536, help="synthetic samples (default 65536)")
    add("--features", type=int, default=64, help="input features (default 64)")
    add("--classes", type=int, default=10, help="classes (default 10)")
    add("--hidden", type=int, default=512, help="hidden width of the MLP (default 512)")
    add("--layers", type=int, default=4, help="hidden layers of the MLP (default 4)")


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("max_steps", "log_every", "batch_size", "dataset_size", "features",
                 "classes", "hidden", "layers"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.checkpoint_every < 0:
        parser.error("--checkpoint-every must be >= 0")


@dataclass(frozen=True)
class Dist:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device


def _agent_store(timeout: timedelta) -> dist.Store | None:
    """The elastic agent's TCP store, under a prefix of this restart attempt.

    The static rendezvous keeps one store for the whole job, so keys written
    by the workers of a failed attempt are still there when the restarted
    workers meet; a per-attempt prefix keeps them from reading stale peers.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
        is_master=False, timeout=timeout,
    )
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "kdist")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"kdist/{run_id}/attempt-{attempt}/", store)


def init_distributed() -> Dist:
    """Join the job's process group (or a group of one when started alone).

    NCCL workers bind to their *local* rank's GPU. The process-group timeout
    is ``KDIST_PG_TIMEOUT`` seconds (set by the launcher), not torch's 30 min.
    Under kdist.launch the group meets in the launcher's store under this
    restart attempt's prefix, so whole-gang restarts work; a user's own
    script can call this too.
    """
    env = os.environ
    rank = int(env.get("RANK", "0"))
    world = int(env.get("WORLD_SIZE", "1"))
    local_rank = int(env.get("LOCAL_RANK", "0"))
    backend = env.get("KDIST_DIST_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")
    timeout = timedelta(seconds=int(env.get("KDIST_PG_TIMEOUT", DEFAULT_PG_TIMEOUT_S)))
    if backend == "nccl":
        if not torch.cuda.is_available():
            sys.exit("kdist: KDIST_DIST_BACKEND=nccl but no GPU is visible; use gloo")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    kwargs: dict[str, Any] = {"timeout": timeout}
    if backend == "nccl":
        kwargs["device_id"] = device
    if "MASTER_ADDR" not in env:
        store: dist.Store | None = dist.HashStore()
        rank, world = 0, 1
    else:
        store = _agent_store(timeout)
    if store is None:
        dist.init_process_group(backend, **kwargs)
    else:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, **kwargs)
    return Dist(rank, world, local_rank, backend, device)


def shutdown_distributed(ok: bool) -> None:
    """Leave the process group while Python is still fully alive.

    DDP and pipeline stages hold the group in reference cycles; left to the
    interpreter's exit, gloo's threads can be destroyed unjoined and abort the
    process after a successful run. On success all ranks leave together.
    """
    if ok:
        dist.barrier()
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()


def log_event(event: str, **fields: Any) -> None:
    """Print one JSON log line (DESIGN.md's format) and flush it."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def maybe_inject_fault(rank: int, step: int) -> None:
    """SIGKILL this process at the step named by ``KDIST_FAULT_KILL_AT`` (tests)."""
    spec = os.environ.get(FAULT_ENV)
    if not spec or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return
    at_rank, _, at_step = spec.partition(":")
    if rank == int(at_rank) and step == int(at_step):
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def make_dataset(seed: int, size: int, features: int, classes: int) -> tuple[torch.Tensor, ...]:
    """A learnable classification set: labels from a fixed random linear teacher.

    Deterministic in ``seed``; made on the CPU so every device agrees.
    """
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(size, features, generator=gen)
    teacher = torch.randn(features, classes, generator=gen)
    y = (x @ teacher).argmax(dim=1)
    return x, y


def mlp_blocks(args: argparse.Namespace) -> list[nn.Module]:
    """The MLP as a list of blocks (Linear+ReLU ..., Linear), seeded by ``args.seed``.

    The pipeline workload splits this list into stages; DDP chains it whole.
    """
    torch.manual_seed(args.seed)
    widths = [args.features] + [args.hidden] * args.layers
    blocks: list[nn.Module] = [
        nn.Sequential(nn.Linear(widths[i], widths[i + 1]), nn.ReLU())
        for i in range(args.layers)
    ]
    blocks.append(nn.Linear(widths[-1], args.classes))
    return blocks


class ShardedBatches:
    """Batch indices for one data-parallel replica, epoch after epoch.

    A ``DistributedSampler`` decides which samples each replica sees in an
    epoch (every sample once across replicas); its order is computed once per
    epoch into one index tensor and sliced per step, so there is no Python
    work per sample. The position is a pure function of the step: resuming
    at step N continues exactly where an uninterrupted run would be.
    """

    def __init__(self, size: int, batch: int, replicas: int, replica: int, seed: int,
                 device: torch.device):
        self.sampler = DistributedSampler(
            range(size), num_replicas=replicas, rank=replica, shuffle=True, seed=seed
        )
        self.batch = batch
        self.device = device
        self.steps_per_epoch = len(self.sampler) // batch
        if self.steps_per_epoch == 0:
            raise SystemExit(
                f"kdist: --dataset-size {size} is too small for {replicas} replica(s) "
                f"of --batch-size {batch}"
            )
        self._epoch = -1
        self._order = torch.empty(0, dtype=torch.long)

    def indices(self, step: int) -> torch.Tensor:
        """Indices of the batch for 0-based ``step``."""
        epoch, offset = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self.sampler.set_epoch(epoch)
            self._order = torch.tensor(list(self.sampler), dtype=torch.long, device=self.device)
            self._epoch = epoch
        return self._order[offset * self.batch : (offset + 1) * self.batch]


class Meter:
    """Loss and throughput over a log interval, synchronising only when read."""

    def __init__(self, device: torch.device, samples_per_step: int):
        self.total = torch.zeros((), device=device)
        self.samples_per_step = samples_per_step
        self.steps = 0
        self.timed_steps = 0
        self.started = time.perf_counter()

    def add(self, loss: torch.Tensor) -> None:
        self.total += loss.detach()
        self.steps += 1
        self.timed_steps += 1

    def pause_clock(self) -> None:
        """Leave the time since the last read (e.g. a checkpoint) out of the rate."""
        self.started = time.perf_counter()
        self.timed_steps = 0

    def read(self) -> tuple[float, float]:
        """(mean loss, samples/s) since the last read; resets both."""
        loss = (self.total / max(1, self.steps)).item()
        elapsed = time.perf_counter() - self.started
        rate = self.timed_steps * self.samples_per_step / elapsed if elapsed > 0 else 0.0
        self.total.zero_()
        self.steps = 0
        self.pause_clock()
        return loss, round(rate, 1)



def run_workload(body: Callable[[Dist], None]) -> int:
    """Join the group, run `body`, leave the group cleanly; 130 on Ctrl-C."""
    d = init_distributed()
    ok = False
    try:
        body(d)
        ok = True
    except KeyboardInterrupt:  # Ctrl-C on a local run: the launcher reports it
        return 128 + signal.SIGINT
    finally:
        shutdown_distributed(ok)
    return 0
