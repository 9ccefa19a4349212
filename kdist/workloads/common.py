"""What both workloads share: flags, process-group setup, JSON log lines,
a deterministic synthetic data set, the MLP, and sharded batch indices."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from kdist.runtime import preemption
from kdist.runtime.failures import is_peer_lost  # shared with the launcher, torch-free
from kdist.shared import env as E
from kdist.shared import exitcodes

DEFAULT_PG_TIMEOUT_S = 300
# --dtype: None = no autocast (plain fp32).
DTYPES: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}
# Test hook: "RANK:STEP" makes that rank SIGKILL itself after that step (see
# maybe_inject_fault).
FAULT_ENV = E.FAULT_KILL_AT
#: Called before a worker that lost a peer exits (DDP's memory copy finishes its write).
AT_PEER_LOST: list[Callable[[], object]] = []


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """The flags every kdist workload takes (docs/user-guide.md, "The training side"), and
    the MLP's shape."""
    add_loop_args(parser)
    add = parser.add_argument
    add("--features", type=int, default=64, help="input features (default 64)")
    add("--classes", type=int, default=10, help="classes (default 10)")
    add("--hidden", type=int, default=512, help="hidden width of the MLP (default 512)")
    add("--layers", type=int, default=4, help="hidden layers of the MLP (default 4)")
    add("--dtype", choices=sorted(DTYPES), default="fp32",
        help="compute precision: bf16 runs forward and loss under torch.autocast in bfloat16 "
             "(GPUs, and CPUs with bf16 units); parameters, gradients and the optimizer "
             "stay fp32 (default fp32)")


def add_loop_args(parser: argparse.ArgumentParser) -> None:
    """The flags of the step loop, checkpoints and data size, whatever the model."""
    add = parser.add_argument
    add("--max-steps", type=int, default=200, help="optimizer steps in total (default 200)")
    add("--batch-size", type=int, default=256,
        help="samples per step per data-parallel replica (default 256)")
    add("--lr", type=float, default=0.1, help="learning rate (default %(default)s)")
    add("--momentum", type=float, default=0.9,
        help="SGD momentum; AdamW's beta1 where the optimizer is AdamW (default 0.9)")
    add("--seed", type=int, default=0, help="seeds the model, the data and the sampler")
    add("--log-every", type=int, default=20, help="one JSON step line per N steps")
    add("--checkpoint-every", type=int, default=100,
        help="checkpoint every N steps, and at the end; 0 = only at the end")
    add("--checkpoint-dir", default=os.environ.get(E.CHECKPOINT_DIR) or None,
        help="default: $KDIST_CHECKPOINT_DIR; no checkpoints when unset")
    add("--keep-checkpoints", type=int, default=2, help="complete checkpoints kept; 0 = all")
    add("--step-delay", type=float, default=0.0,
        help="seconds to sleep after each step, to pace demos and fault drills (default 0)")
    add("--dataset-size", type=int, default=65536, help="synthetic samples (default 65536)")


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    for name in ("max_steps", "log_every", "batch_size", "dataset_size", "features",
                 "classes", "hidden", "layers"):
        if getattr(args, name, 1) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.checkpoint_every < 0:
        parser.error("--checkpoint-every must be >= 0")
    if not 0 <= args.step_delay <= 3600:
        parser.error("--step-delay must be between 0 and 3600 seconds")


def autocast(device: torch.device, dtype: str) -> Callable[[], contextlib.AbstractContextManager]:
    """A factory of the context each forward (and loss) runs in, for ``--dtype``.

    fp32: a no-op. bf16: ``torch.autocast`` on the device's type, so matmuls run
    in bfloat16 while parameters, gradients and the optimizer stay fp32 (the
    backward runs outside it, as torch recommends).
    """
    low = DTYPES[dtype]
    if low is None:
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=low)


@dataclass(frozen=True)
class Dist:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device


def _agent_store(timeout: timedelta) -> dist.Store | None:
    """The elastic agent's TCP store, under a prefix naming the run.

    The store lives as long as node 0's launcher, and kdist never restarts
    workers in place (a restart makes new launchers, hence a new store); the
    prefix keeps the group's keys apart from the agent's own.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
        is_master=False, timeout=timeout,
        # torch's own switch, which only its env:// rendezvous reads by itself: a torch
        # built without libuv (Debian's) refuses even a client asking for it.
        use_libuv=os.environ.get("USE_LIBUV", "1") == "1",
    )
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "kdist")
    return dist.PrefixStore(f"kdist/{run_id}/", store)


def init_distributed() -> Dist:
    """Join the job's process group (or a group of one when started alone).

    NCCL workers bind to their *local* rank's GPU. The process-group timeout
    is ``KDIST_PG_TIMEOUT`` seconds (set by the launcher), not torch's 30 min.
    Under kdist.launch the group meets in the launcher's store. A user's own
    script can call this too; an uncaught lost-peer error then exits
    ``exitcodes.PEER_LOST`` (a gang restart), not 1.
    """
    env = os.environ
    rank = int(env.get("RANK", "0"))
    world = int(env.get("WORLD_SIZE", "1"))
    local_rank = int(env.get("LOCAL_RANK", "0"))
    backend = env.get(E.DIST_BACKEND) or ("nccl" if torch.cuda.is_available() else "gloo")
    timeout = timedelta(seconds=int(env.get(E.PG_TIMEOUT, DEFAULT_PG_TIMEOUT_S)))
    if backend == "nccl":
        problem = gpu_problem(local_rank)
        if problem:
            sys.exit(f"kdist: KDIST_DIST_BACKEND=nccl but {problem}")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    kwargs: dict[str, Any] = {"timeout": timeout}
    if backend == "nccl":
        kwargs["device_id"] = device
    group_backend = pg_backend(backend)
    if "MASTER_ADDR" not in env:
        store: dist.Store | None = dist.HashStore()
        rank, world = 0, 1
    else:
        store = _agent_store(timeout)
    if store is None:
        dist.init_process_group(group_backend, **kwargs)
    else:
        dist.init_process_group(group_backend, store=store, rank=rank, world_size=world,
                                **kwargs)
    _exit_peer_lost_on_uncaught(rank)
    return Dist(rank, world, local_rank, backend, device)


def pg_backend(backend: str) -> str:
    """The process group's backend string: with NCCL, CPU tensors go through gloo.

    A bare "nccl" group refuses every collective on a CPU tensor (a user script's
    metrics, an object gathered on the CPU); "cpu:gloo,cuda:nccl" serves both.
    """
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend


def gpu_problem(local_rank: int) -> str | None:
    """Why this worker cannot drive GPU `local_rank`, in terms a user can act on; None if it can.

    "No GPU" is rarely the truth on a GPU node: torch says why CUDA did not start
    (most often a wheel built for a newer CUDA than the node's driver supports).
    """
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        if local_rank < count:
            return None
        return (f"local rank {local_rank} has no GPU: torch sees {count} "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})")
    built = torch.version.cuda
    if built is None:
        return (f"torch {torch.__version__} is a CPU-only build; install a CUDA wheel or "
                "use gloo")
    try:
        torch.cuda._lazy_init()  # raises with the driver's own reason
        reason = "CUDA initialised but reports no device"
    except Exception as e:
        reason = " ".join(str(e).split())[:300] or type(e).__name__
    major = built.split(".")[0]
    return (f"torch cannot use a GPU: {reason} (torch {torch.__version__} is built for CUDA "
            f"{built} and needs a driver that supports CUDA {major}.x: `nvidia-smi` shows the "
            "newest CUDA the node's driver supports; use a torch wheel or base image for that "
            f"CUDA; NVIDIA_VISIBLE_DEVICES="
            f"{os.environ.get('NVIDIA_VISIBLE_DEVICES', '<unset>')})")


def exit_peer_lost(rank: int, exc: BaseException) -> None:
    """Say why, then leave at once with ``exitcodes.PEER_LOST`` (a gang restart).

    ``os._exit``: tearing the group down with a dead peer can hang (NCCL), and
    nothing of this attempt is worth saving past the last checkpoint.
    """
    first = " ".join(str(exc).split())[:300]
    print(f"kdist: rank {rank} lost a peer ({type(exc).__name__}: {first}); exiting "
          f"{exitcodes.PEER_LOST} so the whole job restarts from its newest checkpoint",
          file=sys.stderr, flush=True)
    sys.stdout.flush()
    for flush in AT_PEER_LOST:
        flush()
    os._exit(exitcodes.PEER_LOST)


def _exit_peer_lost_on_uncaught(rank: int) -> None:
    """A user's own script gets the same exit code when a lost peer ends it."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        if is_peer_lost(exc):
            traceback.print_exception(kind, exc, tb)
            exit_peer_lost(rank, exc)
        previous(kind, exc, tb)

    sys.excepthook = hook


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
    """Print one JSON log line (docs/DESIGN.md, "JSON log lines") and flush it."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def after_step(rank: int, step: int, args: argparse.Namespace) -> None:
    """What both workloads do once a step is done: the fault hook, then ``--step-delay``."""
    maybe_inject_fault(rank, step, args.checkpoint_dir)
    if args.step_delay:
        time.sleep(args.step_delay)


def maybe_inject_fault(rank: int, step: int, checkpoint_dir: str | None = None) -> None:
    """SIGKILL this process at the step named by ``KDIST_FAULT_KILL_AT`` (tests).

    Once per job: a marker in the checkpoint directory remembers it across
    gang restarts (without a checkpoint directory it strikes every attempt).
    """
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    at_rank, _, at_step = spec.partition(":")
    if rank != int(at_rank) or step != int(at_step):
        return
    if checkpoint_dir:
        marker = os.path.join(checkpoint_dir, f".kdist-fault-{rank}-{step}")
        if os.path.exists(marker):
            return
        with open(marker, "w"):
            pass
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
        # Any sized sequence does as a "dataset": the sampler only needs its length.
        self.sampler: DistributedSampler[int] = DistributedSampler(
            range(size),  # type: ignore[arg-type]
            num_replicas=replicas, rank=replica, shuffle=True, seed=seed,
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
    """Join the group, run `body`, leave the group cleanly; 130 on Ctrl-C.

    SIGTERM (a pod deleted, evicted, drained) is a request to stop: the step
    loop saves at a step every rank agreed on and this returns
    ``preemption.PREEMPTED`` (``kdist.runtime.preemption``). A lost peer ends
    the process with ``exitcodes.PEER_LOST`` (see there); any other exception
    propagates: a code error.
    """
    preemption.install()
    d = init_distributed()
    ok = False
    try:
        body(d)
        ok = True
    except KeyboardInterrupt:  # Ctrl-C on a local run: the launcher reports it
        return 128 + signal.SIGINT
    except preemption.Preempted:
        return preemption.PREEMPTED
    except Exception as e:
        if is_peer_lost(e):
            exit_peer_lost(d.rank, e)
        raise
    finally:
        shutdown_distributed(ok)
    return 0
