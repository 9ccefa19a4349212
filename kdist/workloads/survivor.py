"""Which rank's memory a restarted DDP gang resumes from (``kdist.workloads.memory``): the
agreement, a pure function of what each rank holds, torch-free."""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

#: The flags a state belongs to: a file made under others is another model's (ignored).
KEY_FLAGS = ("features", "classes", "hidden", "layers", "batch_size", "dataset_size", "seed")


@dataclass(frozen=True)
class Plan:
    """Who resumes from whose memory: the step, the rank that sends it, those it goes to."""

    step: int
    source: int
    receivers: tuple[int, ...]


def plan(held: Sequence[int | None], checkpoint_step: int | None) -> Plan | None:
    """From the step each rank holds in memory (None: nothing) and the newest checkpoint's
    step (None: none), the plan; None when no rank holds a step newer than the checkpoint.

    The lowest rank holding the newest step sends it; every rank holding anything else
    (an older step, nothing) receives it; those holding it already load their own.
    """
    newest = max((s for s in held if s is not None), default=None)
    if newest is None or (checkpoint_step is not None and newest <= checkpoint_step):
        return None
    source = held.index(newest)
    return Plan(newest, source, tuple(r for r, s in enumerate(held) if s != newest))


def describe(p: Plan, held: Sequence[int | None], checkpoint_step: int | None) -> str:
    """Rank 0's line on a resume from memory."""
    ckpt = "none" if checkpoint_step is None else f"step {checkpoint_step}"
    each = ", ".join(f"rank {r} " + ("none" if s is None else f"step {s}")
                     for r, s in enumerate(held))
    return (f"resuming from the memory of rank {p.source}, step {p.step} (newest checkpoint: "
            f"{ckpt}; memory: {each}): at most the step in flight is lost")


def state_key(args: argparse.Namespace, world_size: int) -> str:
    """What a file's state must have been made under to be resumed from."""
    made = {name: getattr(args, name, None) for name in KEY_FLAGS}
    return hashlib.sha256(json.dumps([made, world_size]).encode()).hexdigest()[:16]
