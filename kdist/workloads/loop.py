"""The step loop both workloads share: JSON log lines, the fault hook, checkpoints,
preemption (a SIGTERM stops every rank at one step, saved), done.

A workload supplies what differs (one optimizer step, how the interval's loss
is read, what a checkpoint holds); the cadence of logging and saving, and
the lines printed (docs/DESIGN.md, "JSON log lines"), are the same for both.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdist.runtime.preemption import Preempted, StopVote
from kdist.workloads.checkpoint import Checkpointer
from kdist.workloads.common import Dist, Meter, after_step, log_event


@dataclass
class Saver:
    """Writes checkpoints of this rank's shards (none on ranks that hold no shard)."""

    ckpt: Checkpointer
    d: Dist
    meter: Meter
    shards: Callable[[int], Mapping[str, Any]]  # step -> {shard name: state} this rank writes
    meta: Callable[[], Mapping[str, Any]] = dict

    def __call__(self, step: int, loss: float | None) -> None:
        path = self.write(step, {"loss": loss, **self.meta()})
        if self.d.rank == 0:
            log_event("checkpoint", step=step, path=str(path), rank=self.d.rank,
                      world_size=self.d.world_size)
        self.meter.pause_clock()  # saving is not training time

    def write(self, step: int, meta: dict[str, Any]) -> Path:
        return self.ckpt.save(step, self.shards(step), meta)


def run_steps(args: argparse.Namespace, d: Dist, *, start: int, loss: float | None,
              step: Callable[[int], None], read: Callable[[], tuple[float, float]],
              samples_per_step: int, save: Saver | None,
              remember: Callable[[int, float | None], None] | None = None,
              start_saved: bool = True) -> None:
    """Steps `start + 1 .. args.max_steps`: `step(n)` trains, `read()` gives (loss, samples/s);
    `remember(n, loss)`, when given, keeps the state after step n (DDP's memory copy);
    `start_saved`: whether a checkpoint holds step `start` (not so after a resume from memory).

    Step lines carry `steps_per_s` too, so a watcher can tell the time left. Raises
    ``Preempted`` once every rank agreed to stop (a SIGTERM), after saving that step.
    """
    saved = start if start_saved else -1
    vote = StopVote()
    for n in range(start + 1, args.max_steps + 1):
        step(n)
        if n % args.log_every == 0 or n == args.max_steps:
            loss, rate = read()
            log_event("step", step=n, loss=loss, samples_per_s=rate,
                      steps_per_s=round(rate / samples_per_step, 3), rank=d.rank,
                      world_size=d.world_size)
        if remember is not None:
            remember(n, loss)
        after_step(d.rank, n, args)
        if save is not None and args.checkpoint_every and n % args.checkpoint_every == 0:
            save(n, loss)
            saved = n
        # A SIGTERM on any rank stops every rank here, after the same step (at most two
        # steps later: the vote is read a step after it started, so it never waits), and
        # that step is saved: a drain or an eviction loses no step.
        if n < args.max_steps and vote.poll():
            if save is not None and saved != n:
                save(n, loss)
            log_event("preempted", step=n, rank=d.rank, world_size=d.world_size)
            raise Preempted(n)
    vote.close()
    if save is not None and saved < args.max_steps:
        save(args.max_steps, loss)
    log_event("done", step=max(start, args.max_steps), loss=loss, rank=d.rank,
              world_size=d.world_size)
