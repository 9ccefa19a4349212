"""Which of this machine's GPUs each node of a local run gets (``kdist.local``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from kdist.shared.errors import UsageError


def _gpu_env(job: Any, envs: list[dict[str, str]]) -> None:
    """Each node its own share of this machine's GPUs (the pods' GPU defaults are in its
    env already: `kdist.rendering.contract.pod_env`)."""
    per_node = job.spec.resources.gpus
    if not per_node:
        return
    visible = visible_gpus(os.environ)
    shares = gpu_shares(visible, job.spec.nodes, per_node, job.spec.dist_backend)
    if shares is None:
        print(f"kdist: this machine has {len(visible)} GPU(s), fewer than the spec's "
              f"{job.spec.nodes} x {per_node}: the gloo workers run without GPUs of their own",
              file=sys.stderr, flush=True)
        return
    for env, share in zip(envs, shares, strict=True):
        env["CUDA_VISIBLE_DEVICES"] = share


def visible_gpus(environ: Mapping[str, str], count: Any = None) -> list[str]:
    """This machine's GPUs as CUDA_VISIBLE_DEVICES entries (indices or UUIDs)."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        out = []
        for entry in environ["CUDA_VISIBLE_DEVICES"].split(","):
            entry = entry.strip()
            if not entry or entry.startswith("-"):  # CUDA stops at the first invalid entry
                break
            out.append(entry)
        return out
    return [str(i) for i in range((count or _device_count)())]


def _device_count() -> int:
    import torch  # a local run needs torch anyway (checked by _preflight)

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def gpu_shares(visible: Sequence[str], nodes: int, per_node: int, backend: str) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES for each local node: disjoint, `per_node` GPUs each.

    NCCL refuses two ranks on one GPU, so an NCCL job that does not fit is refused
    (UsageError, exit 2); a gloo job runs without pinning (None).
    """
    need = nodes * per_node
    if len(visible) < need:
        if backend != "nccl":
            return None
        raise UsageError(
            f"spec.resources.gpus: {nodes} node(s) x {per_node} GPU(s) need {need} GPUs, this "
            f"machine has {len(visible)}; lower spec.nodes or spec.resources.gpus to run it "
            "locally")
    return [",".join(visible[i * per_node:(i + 1) * per_node]) for i in range(nodes)]
