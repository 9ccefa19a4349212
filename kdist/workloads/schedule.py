"""The pipeline workload's schedules, GPipe and 1F1B, over point-to-point messages.

One ``StageRunner`` per rank runs its stage's micro-batches in the schedule's
order. What it sends is the least a pipeline can send: per step and per stage
boundary, each micro-batch's activation forward and its input gradient
backward, one message each (2 x m). The per-message cost is kept small:

- every receive of a step is posted when the step starts, into buffers the
  stage allocated once (their shapes are known up front: ``Boundary``), so a
  message never waits for its receiver and the data is there by the time the
  stage needs it;
- sends and receives are issued by one communication thread: a gloo send
  can block until the peer's transport takes the bytes (measured: ~4 ms of a
  256 KB send on the stage's own thread, on this 2-core machine), and the
  stage computes on meanwhile; sends are awaited once, at the end of the step;
- no shape exchange, no per-step planning: the order of actions is computed
  once;
- backward carries only input gradients; the Linear layers' weight gradients
  (``WeightGrads``) are computed while the stage would wait for a message,
  and the rest at the end of the step (zero-bubble's split of B and W), so
  the previous stage gets its gradient sooner.

The result equals the unsplit model's: each micro-batch's loss is scaled by
1/m before its backward, so the gradients add up to those of the whole
batch's mean loss.
"""

from __future__ import annotations

import contextlib
import functools
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

SCHEDULES = ("1f1b", "gpipe")
FORWARD, BACKWARD = "F", "B"


@dataclass(frozen=True)
class Boundary:
    """What crosses a stage boundary for one micro-batch: shape and dtype."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def actions(schedule: str, stages: int, stage: int, microbatches: int) -> list[tuple[str, int]]:
    """This stage's order of forwards and backwards, e.g. [("F", 0), ("F", 1), ("B", 0), ...].

    GPipe: every forward, then every backward. 1F1B: ``stages - stage - 1``
    warm-up forwards, then one forward and one backward in turn, then the
    remaining backwards, so a stage holds at most ``stages - stage``
    micro-batches' activations.
    """
    m = microbatches
    if schedule == "gpipe":
        return [(FORWARD, i) for i in range(m)] + [(BACKWARD, i) for i in range(m)]
    if schedule != "1f1b":
        raise ValueError(f"unknown schedule {schedule!r}")
    warm = min(m, stages - stage - 1)
    order = [(FORWARD, i) for i in range(warm)]
    forward = warm
    for backward in range(m):
        if forward < m:
            order.append((FORWARD, forward))
            forward += 1
        order.append((BACKWARD, backward))
    return order


class _Linear(torch.autograd.Function):
    """``F.linear`` whose backward gives only the input gradient and leaves the
    weight gradient's inputs (x, dy) to ``WeightGrads`` (zero-bubble's B/W split)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                layer: nn.Linear, pending: deque) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.layer, ctx.pending = layer, pending
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, None, None, None, None]:
        x, weight = ctx.saved_tensors
        ctx.pending.append((ctx.layer, x, dy))
        dx = (dy @ weight.to(dy.dtype)).to(x.dtype) if ctx.needs_input_grad[0] else None
        return dx, None, None, None, None


class WeightGrads:
    """The weight gradients of ``module``'s Linear layers, computed apart from backward.

    Backward then only carries the input gradients, so a stage hands the
    previous one its gradient sooner; the weight gradients are computed while
    the stage would otherwise wait for a message, and the rest at the end of
    the step. Each is accumulated in place (``addmm_``, no separate add pass
    over the gradient per micro-batch).
    """

    def __init__(self, module: nn.Module):
        self.pending: deque[tuple[nn.Linear, torch.Tensor, torch.Tensor]] = deque()
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                layer.forward = functools.partial(self._forward, layer)  # type: ignore[method-assign]

    def _forward(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return _Linear.apply(x, layer.weight, layer.bias, layer, self.pending)

    def one(self) -> bool:
        """Compute the oldest pending weight gradient; False when none was pending."""
        if not self.pending:
            return False
        layer, x, dy = self.pending.popleft()
        w, b = layer.weight, layer.bias
        if w.grad is None:
            w.grad = (dy.t() @ x.to(dy.dtype)).to(w.dtype)
        elif dy.dtype == w.dtype:
            w.grad.addmm_(dy.t(), x.to(dy.dtype))
        else:
            w.grad += dy.t() @ x.to(dy.dtype)
        if b is not None:
            db = dy.sum(0, dtype=b.dtype)
            b.grad = db if b.grad is None else b.grad.add_(db)
        return True

    def all(self) -> None:
        while self.one():
            pass


class StageRunner:
    """One stage of one pipeline: runs a step of m micro-batches (docstring above).

    ``prev``/``next`` are the global ranks of the neighbouring stages (None at
    the ends); ``inbound``/``outbound`` what crosses to and from them;
    ``autocast`` is entered around each forward (``common.autocast``).
    """

    def __init__(self, module: nn.Module, *, schedule: str, stages: int, stage: int,
                 microbatches: int, prev: int | None, next: int | None,
                 inbound: Boundary | None, outbound: Boundary | None,
                 group: dist.ProcessGroup | None, device: torch.device,
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 autocast: Callable[[], contextlib.AbstractContextManager] = (
                     contextlib.nullcontext)):
        self.module = module
        self.m = microbatches
        self.order = actions(schedule, stages, stage, microbatches)
        self.prev, self.next, self.group = prev, next, group
        self.loss_fn = loss_fn
        self.autocast = autocast
        self.messages = 0  # sent by this stage so far (tests count them)

        def buffers(b: Boundary | None, peer: int | None) -> list[torch.Tensor]:
            if peer is None:
                return []
            assert b is not None
            return [torch.empty(b.shape, dtype=b.dtype, device=device)
                    for _ in range(microbatches)]

        self.activations_in = buffers(inbound, prev)
        self.gradients_in = buffers(outbound, next)
        self.weights = WeightGrads(module)
        # Every send and receive is issued from this one thread, in order.
        # (On a GPU, the thread drives this rank's device too: CUDA's is per thread.)
        def bind() -> None:
            if device.type == "cuda":
                torch.cuda.set_device(device)

        self._comm = ThreadPoolExecutor(1, thread_name_prefix="kdist-pipeline", initializer=bind)

    def _wait(self, posted: Future) -> None:
        """Wait for a receive, computing pending weight gradients until it is in."""
        while not (posted.done() and posted.result().is_completed()) and self.weights.one():
            pass
        posted.result().wait()

    def _send(self, tensor: torch.Tensor, peer: int | None, tag: int,
              pending: list[Future]) -> None:
        """Send ``tensor`` from the communication thread (a gloo send can block until
        the peer takes it; the stage computes on meanwhile). ``pending`` keeps it."""
        assert peer is not None
        tensor = tensor.detach().contiguous()

        def send() -> torch.Tensor:
            work = dist.isend(tensor, dst=peer, group=self.group, tag=tag)
            assert work is not None
            work.wait()
            return tensor

        pending.append(self._comm.submit(send))
        self.messages += 1

    def _post_receives(self) -> tuple[list[Future], list[Future]]:
        def post(bufs: list[torch.Tensor], peer: int | None) -> list[Future]:
            return [self._comm.submit(dist.irecv, buf, src=peer, group=self.group, tag=i)
                    for i, buf in enumerate(bufs)]

        return post(self.activations_in, self.prev), post(self.gradients_in, self.next)

    def step(self, inputs: torch.Tensor | None = None,
             target: torch.Tensor | None = None) -> torch.Tensor | None:
        """One step's forwards and backwards (gradients accumulate into ``.grad``).

        The first stage takes the batch, the last the targets; the last
        returns the batch's mean loss (detached), the others None.
        """
        first, last = self.prev is None, self.next is None
        act_recv, grad_recv = self._post_receives()
        xs = inputs.chunk(self.m) if first and inputs is not None else ()
        ys = target.chunk(self.m) if last and target is not None else ()
        held_in: list[torch.Tensor | None] = [None] * self.m
        held_out: list[torch.Tensor | None] = [None] * self.m
        sends: list[Future] = []
        losses: list[torch.Tensor] = []
        for kind, i in self.order:
            if kind == FORWARD:
                if first:
                    x = xs[i]
                else:
                    self._wait(act_recv[i])
                    x = self.activations_in[i].detach().requires_grad_()
                with self.autocast():
                    y = self.module(x)
                    if last:
                        y = self.loss_fn(y, ys[i])
                        losses.append(y.detach())
                if not last:
                    self._send(y, self.next, i, sends)
                held_in[i], held_out[i] = x, y
                continue
            held, x_held = held_out[i], held_in[i]
            assert held is not None and x_held is not None
            held_in[i] = held_out[i] = None
            if last:
                (held / self.m).backward()
            else:
                self._wait(grad_recv[i])
                held.backward(self.gradients_in[i])
            if not first:
                assert x_held.grad is not None
                self._send(x_held.grad, self.prev, i, sends)
        self.weights.all()
        for sent in sends:
            sent.result()
        return torch.stack(losses).mean() if last else None
