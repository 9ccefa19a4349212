"""Every torch API the FSDP2 workload leans on, in one module, behind one version check.

FSDP2 (``fully_shard`` on DTensor), tensor parallelism, the 2-D DeviceMesh and
DCP's state-dict helpers moved between torch releases; if torch moves them
again, this is the one place to change (and tests/dist/test_fsdp.py the
loud test). Importing this module on a torch too old for them exits with a
message saying which torch is needed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

MIN_TORCH = (2, 6)  # fully_shard public in torch.distributed.fsdp; DCP state_dict helpers


def torch_version(text: str = torch.__version__) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", text)
    if not match:
        raise SystemExit(f"kdist: cannot read torch's version {text!r}")
    return int(match.group(1)), int(match.group(2))


if torch_version() < MIN_TORCH:
    raise SystemExit(f"kdist: the fsdp workload needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]} "
                     f"(FSDP2's fully_shard, DTensor, DCP); this is torch {torch.__version__}")

# Below the check: these names do not all exist in older releases.
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch import nn  # noqa: E402
from torch.distributed.checkpoint.state_dict import (  # noqa: E402
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh  # noqa: E402
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402
from torch.distributed.tensor.parallel import (  # noqa: E402
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

STYLES = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}


def mesh(device_type: str, dp: int, tp: int) -> DeviceMesh:
    """A ("dp", "tp") mesh over the default group: rank r is dp r // tp, tp r % tp.

    Consecutive ranks share a TP group, so with ``tp`` dividing the processes
    per node every TP group stays inside one node (its all-reduces on NVLink).
    """
    return init_device_mesh(device_type, (dp, tp), mesh_dim_names=("dp", "tp"))


def mixed_precision(low: torch.dtype | None, reduce: torch.dtype | None) -> MixedPrecisionPolicy:
    """Parameters gathered (and computed) in ``low``, gradients reduced in ``reduce``;
    the sharded parameters the optimizer updates stay fp32 (the master weights)."""
    return MixedPrecisionPolicy(param_dtype=low, reduce_dtype=reduce)


def shard(model: nn.Module, blocks: list[nn.Module], device_mesh: DeviceMesh,
          tp_plan: dict[str, str], policy: MixedPrecisionPolicy) -> None:
    """TP in each block over ``tp`` (when > 1), then FSDP2 per block and at the root over ``dp``.

    Per block, so only one block's parameters are gathered at a time (and
    the next block's gather overlaps this one's compute); the root takes
    what is left (embeddings, final norm, head).
    """
    tp_mesh, dp_mesh = device_mesh["tp"], device_mesh["dp"]
    for block in blocks:
        if tp_mesh.size() > 1:
            parallelize_module(block, tp_mesh,
                               {name: STYLES[style]() for name, style in tp_plan.items()})
        fully_shard(block, mesh=dp_mesh, mp_policy=policy)
    fully_shard(model, mesh=dp_mesh, mp_policy=policy)


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


def train_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """Model and optimizer state as DTensor shards keyed by parameter name (DCP's form)."""
    model_sd, optim_sd = get_state_dict(model, opt)
    return {"model": model_sd, "optimizer": optim_sd}


def forget_optimizer_state(opt: torch.optim.Optimizer) -> None:
    """Undo what ``train_state`` did to a fresh optimizer when nothing was loaded into it.

    To have tensors to load into, get_state_dict runs one optimizer step on zero
    gradients at lr 0: parameters stay, but AdamW's step count becomes 1, which
    would change every later update's bias correction. Its state is made lazily
    again at the first real step.
    """
    opt.state.clear()


def load_train_state(model: nn.Module, opt: torch.optim.Optimizer,
                     state: dict[str, Any]) -> None:
    set_state_dict(model, opt, model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"])


def full_train_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, Any]:
    """The whole (unsharded) state on every rank's CPU: for tests and comparisons."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd, optim_sd = get_state_dict(model, opt, options=options)
    return {"model": model_sd, "optimizer": optim_sd}


def save(state: dict[str, Any], directory: Path) -> None:
    """Collective: each rank writes its own shards under ``directory``, rank 0 the metadata."""
    dcp.save(state, checkpoint_id=str(directory))


def load(state: dict[str, Any], directory: Path) -> None:
    """Collective: fill ``state`` (this rank's shards, in place) from ``directory``,
    whatever world size and mesh wrote it (DCP reshards)."""
    dcp.load(state, checkpoint_id=str(directory))


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a (maybe distributed) tensor."""
    return t.to_local() if isinstance(t, DTensor) else t
