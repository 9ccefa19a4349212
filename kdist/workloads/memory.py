"""DDP's state from a surviving rank's memory (issue 54): at most the step in flight is lost.

Every DDP rank holds the whole model and optimizer, so after each step each rank keeps its
newest state in a file in memory (``memory_file``: /dev/shm, which a worker restarted in
the same pod finds), copied at the step's end and written by a thread of its own while
the next step runs. On a (re)start, right after the group forms, the ranks gather the
step each holds and rank 0 adds the newest checkpoint's; when some rank holds a step newer
than that checkpoint, the lowest such rank sends its state to every rank that lacks it (a
spare's new worker, a rank whose pod was replaced), and all go on from there, whatever
the checkpoint interval. Otherwise the newest checkpoint is loaded as before.

The cost: a copy of the model and optimizer per step (host memory: the copy, the bytes
being written and the file, about 3x their size), the thread's time, and a message of that
size to each rank lacking it at a restart.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from kdist.shared import env as E
from kdist.workloads import memory_file
from kdist.workloads.common import AT_PEER_LOST, Dist, log_event
from kdist.workloads.global_batch import full_world_size
from kdist.workloads.survivor import describe, plan, state_key

#: Each tensor's bytes start at a multiple of this in the file's state (any dtype's size).
ALIGN = 16
#: How long a worker that lost its peer waits for its write in flight before it exits.
FLUSH_S = 10.0


class _Writer:
    """One thread that writes the newest state handed to it; `wait` until it is idle."""

    def __init__(self, write: Callable[[int, Any, Any], None]):
        self._write = write
        self._cv = threading.Condition()
        self._job: tuple[int, Any, Any] | None = None
        self._busy = False
        self.failed = False
        threading.Thread(target=self._run, name="kdist-memory", daemon=True).start()

    def submit(self, step: int, tree: Any, ready: Any) -> None:
        with self._cv:
            self._job, self._busy = (step, tree, ready), True
            self._cv.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._job is not None)
                job, self._job = self._job, None
            assert job is not None
            try:
                self._write(*job)
            except Exception as e:  # a full /dev/shm: training goes on without the copy
                self.failed = True
                _say(f"keeping the state in memory failed ({type(e).__name__}: {e}); "
                     "resuming from the newest checkpoint instead")
            with self._cv:
                self._busy = False
                self._cv.notify_all()


def _copy(tree: Any, buffers: dict[tuple, torch.Tensor], path: tuple = ()) -> Any:
    """`tree` with each tensor copied into a host buffer kept for its place (reused step
    after step; pinned for a GPU tensor, whose copy is then asynchronous)."""
    if isinstance(tree, torch.Tensor):
        buf = buffers.get(path)
        if buf is None or buf.shape != tree.shape or buf.dtype != tree.dtype:
            buf = buffers[path] = torch.empty(tree.shape, dtype=tree.dtype,
                                              pin_memory=tree.is_cuda)
        buf.copy_(tree.detach(), non_blocking=tree.is_cuda)
        return buf
    if isinstance(tree, dict):
        return {k: _copy(v, buffers, (*path, k)) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_copy(v, buffers, (*path, i)) for i, v in enumerate(tree))
    return tree


def memory_copy(args: argparse.Namespace, d: Dist, model: nn.Module,
                opt: torch.optim.Optimizer) -> MemoryCopy | None:
    """This rank's memory copy, or None: ``--no-memory-copy``, or a process started alone
    (no launcher: nothing restarts it, and no job name keeps two such runs apart)."""
    if args.no_memory_copy or "MASTER_ADDR" not in os.environ:
        return None
    # The port too: two local jobs of one name on one machine never share it. The job's
    # port (KDIST_MASTER_PORT), not the store's: a store that moved to another node
    # (kdist.runtime.hostmove) listens on another port in a local run.
    job = os.environ.get(E.JOB_NAME) or os.environ.get("TORCHELASTIC_RUN_ID", "kdist")
    port = os.environ.get(E.MASTER_PORT) or os.environ["MASTER_PORT"]
    return MemoryCopy(args, d, model, opt, f"{job}-{port}")


class MemoryCopy:
    """This rank's newest state in memory: `remember` after each step, `resume` at start."""

    def __init__(self, args: argparse.Namespace, d: Dist, model: nn.Module,
                 opt: torch.optim.Optimizer, job: str):
        self.d, self.model, self.opt = d, model, opt
        # An elastic job's state is the same training at any size (its global batch is
        # kept): a gang that shrank or grew resumes from the memory of the larger or smaller.
        self.key = state_key(args, full_world_size() or d.world_size)
        self.path = memory_file.path_for(job, d.rank)
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._writer = _Writer(self._write)
        AT_PEER_LOST.append(lambda: self._writer.wait(FLUSH_S))

    def remember(self, step: int, loss: float | None) -> None:
        """Hand the state after `step` to the writer (waiting for its previous write: the
        buffers are reused)."""
        if self._writer.failed:
            return
        self._writer.wait()
        tree = _copy({"model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                      "rng": torch.get_rng_state()}, self._buffers)
        ready = None
        if self.d.device.type == "cuda":
            ready = torch.cuda.Event()
            ready.record()
        self._writer.submit(step, {**tree, "step": step, "loss": loss}, ready)

    def _write(self, step: int, tree: Any, ready: Any) -> None:
        if ready is not None:
            ready.synchronize()
        memory_file.write(self.path, step, self.key, encode(tree))

    def close(self) -> None:
        """The run is done: its state in memory is of no further use."""
        self._writer.wait(FLUSH_S)
        memory_file.remove(self.path)

    def resume(self, checkpoint_step: int | None) -> tuple[int, float | None] | None:
        """A collective: load the newest state any rank holds in memory when it is newer
        than `checkpoint_step` (rank 0's word counts); (step, loss), or None."""
        d = self.d
        held = memory_file.read(self.path, self.key)
        gathered: list[Any] = [None] * d.world_size
        dist.all_gather_object(gathered, [held.step if held else None, checkpoint_step])
        steps = [g[0] for g in gathered]
        newest_ckpt = gathered[0][1]
        p = plan(steps, newest_ckpt)
        if p is None:
            return None
        if d.rank == 0:
            _say(describe(p, steps, newest_ckpt))
        if d.rank == p.source and held is not None:
            payload = held.payload
            for r in p.receivers:
                _send(payload, r)
        elif d.rank in p.receivers:
            payload = _recv(p.source)
        else:
            assert held is not None
            payload = held.payload
        state = decode(payload)
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        log_event("resume", step=p.step, source=f"memory of rank {p.source}, step {p.step}",
                  memory_rank=p.source, rank=d.rank, world_size=d.world_size)
        return p.step, state.get("loss")


def encode(tree: Any) -> list[bytes | memoryview]:
    """`tree` (dicts, lists, tensors on the host, JSON's scalars) as chunks of bytes: an
    index (8 bytes of its length, then JSON: the tree with each tensor as its number, dicts
    as pairs to keep their int keys) and each tensor's raw bytes. No pickle, no copy: the
    chunks are views of the tensors (torch.save took 4x as long, measured)."""
    tensors: list[torch.Tensor] = []

    def skeleton(node: Any) -> Any:
        if isinstance(node, torch.Tensor):
            tensors.append(node)
            return {"t": len(tensors) - 1, "dtype": str(node.dtype).removeprefix("torch."),
                    "shape": list(node.shape)}
        if isinstance(node, dict):
            return {"d": [[k, skeleton(v)] for k, v in node.items()]}
        if isinstance(node, (list, tuple)):
            return {"l": [skeleton(v) for v in node]}
        return {"v": node}

    index = json.dumps(skeleton(tree)).encode()
    chunks: list[bytes | memoryview] = [len(index).to_bytes(8, "little"), index]
    for t in tensors:
        view = t.contiguous().reshape(-1).view(torch.uint8).numpy().data
        chunks.append(view)
        if len(view) % ALIGN:  # each tensor starts aligned for any dtype
            chunks.append(bytes(ALIGN - len(view) % ALIGN))
    return chunks


def decode(payload: bytes) -> Any:
    """The tree `encode` made (its tensors in one buffer of their own)."""
    size = int.from_bytes(payload[:8], "little")
    data = bytearray(memoryview(payload)[8 + size:])
    offset = 0

    def build(node: dict[str, Any]) -> Any:
        nonlocal offset
        if "t" in node:
            dtype = getattr(torch, node["dtype"])
            count = 1
            for n in node["shape"]:
                count *= n
            flat = torch.frombuffer(data, dtype=dtype, count=count, offset=offset) \
                if count else torch.empty(0, dtype=dtype)
            nbytes = count * flat.element_size()
            offset += nbytes + (-nbytes) % ALIGN
            return flat.reshape(node["shape"])
        if "d" in node:
            return {k: build(v) for k, v in node["d"]}
        if "l" in node:
            return [build(v) for v in node["l"]]
        return node["v"]

    return build(json.loads(payload[8:8 + size]))


def _send(payload: bytes, to: int) -> None:
    """Point to point on the CPU (gloo, also in an NCCL job's cpu:gloo,cuda:nccl group)."""
    dist.send(torch.tensor([len(payload)], dtype=torch.int64), dst=to)
    dist.send(torch.frombuffer(bytearray(payload), dtype=torch.uint8), dst=to)


def _recv(source: int) -> bytes:
    size = torch.zeros(1, dtype=torch.int64)
    dist.recv(size, src=source)
    data = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.recv(data, src=source)
    return data.numpy().tobytes()


def _say(message: str) -> None:
    print(f"kdist.workloads.memory: {message}", file=sys.stderr, flush=True)
