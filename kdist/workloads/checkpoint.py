"""Atomic, verified checkpoints for the workloads (a collective API).

Layout of the checkpoint directory::

    step-40/                 one complete checkpoint
        state.pt             one file per shard (DDP: ``state``; pipeline: ``stage-S``)
                             (fsdp: DCP's files, ``__R_0.distcp`` per rank and ``.metadata``)
        MANIFEST.json        {"step": 40, "files": {"state.pt": {"sha256": ..., "bytes": ...}}, ...}
    latest                   "step-40": replaced (os.replace) only once step-40/ is complete
    .tmp-<token>-step-60/    being written; renamed to step-60/ when every shard is in

Torch's DCP writer is not atomic when it overwrites, so every checkpoint is a
new directory that only appears, complete, through one rename, and the
``latest`` pointer moves after it. Loading verifies each shard's sha256
against the manifest and falls back to the next older checkpoint when any
rank finds the newest one missing or corrupt.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

LATEST = "latest"
MANIFEST = "MANIFEST.json"
FORMAT, DCP = "format", "dcp"  # meta of a checkpoint torch.distributed.checkpoint wrote
_STEP_DIR = re.compile(r"step-(\d+)")


@dataclass
class Loaded:
    """A checkpoint every rank agreed on: its step, this rank's shards, its metadata."""

    step: int
    name: str
    shards: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    part = path.with_name(path.name + ".part")
    with open(part, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(part, path)
    _fsync_dir(path.parent)


def _step_of(name: str) -> int | None:
    match = _STEP_DIR.fullmatch(name)
    return int(match.group(1)) if match else None


class Checkpointer:
    """Saves and loads sharded checkpoints under one directory.

    Every method is a collective over the default process group: call it on
    all ranks. A rank may own zero or more named shards.
    """

    def __init__(self, directory: str | os.PathLike[str], *, keep: int = 2):
        self.dir = Path(directory)
        self.keep = keep
        self.rank = dist.get_rank()
        token: list[str | None] = [None]
        if self.rank == 0:
            self.dir.mkdir(parents=True, exist_ok=True)
            # Nobody writes yet: partial directories are from dead runs.
            for stale in self.dir.glob(".tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
            token[0] = uuid.uuid4().hex[:12]
        dist.broadcast_object_list(token, src=0)
        self.token = token[0]

    def _tmp(self, step: int) -> Path:
        return self.dir / f".tmp-{self.token}-step-{step}"

    def require_shared(self, device: torch.device | None = None) -> None:
        """Exit with a message on every rank unless every rank sees rank 0's directory.

        DCP checkpoints have a file per rank in one directory: a volume per pod
        (an emptyDir) would leave each pod's shards where no other rank can read them.
        """
        probe = self.dir / f".tmp-{self.token}-shared"
        if self.rank == 0:
            write_atomic(probe, b"")
        dist.barrier()
        flag = torch.tensor([1 if probe.exists() else 0], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        dist.barrier()
        if self.rank == 0:
            probe.unlink()
        if flag.item() == 0:
            sys.exit(f"kdist: rank {self.rank}: the checkpoint directory {self.dir} is not "
                     "shared by every rank (spec.checkpoint.volume: use a volume every pod "
                     "mounts, e.g. a ReadWriteMany persistentVolumeClaim); each rank writes "
                     "its own shards there")

    def save(self, step: int, shards: Mapping[str, Any], meta: Mapping[str, Any]) -> Path:
        """Write this rank's shards; rank 0 publishes ``step-N/`` and moves ``latest``."""
        tmp = self._tmp(step)
        entries: dict[str, dict[str, Any]] = {}
        if shards:
            tmp.mkdir(parents=True, exist_ok=True)
        for name, obj in shards.items():
            buf = io.BytesIO()
            torch.save(obj, buf)
            data = buf.getvalue()
            write_atomic(tmp / f"{name}.pt", data)
            entries[f"{name}.pt"] = {"sha256": _sha256(data), "bytes": len(data)}
        return self._publish(step, tmp, entries, dict(meta))

    def save_dcp(self, step: int, write: Callable[[Path], None],
                 meta: Mapping[str, Any]) -> Path:
        """Like ``save``, for a DCP checkpoint: ``write(directory)`` (a collective, e.g.
        ``dcp.save``) puts every rank's shards there; the ranks then hash its files
        between them, and rank 0 publishes ``step-N/`` as ``save`` does."""
        tmp = self._tmp(step)
        tmp.mkdir(parents=True, exist_ok=True)
        write(tmp)
        dist.barrier()  # every rank's files are in before anyone lists them
        names = self._my_share([p.name for p in sorted(tmp.iterdir()) if p.name != MANIFEST]
                               if self.rank == 0 else None)
        entries = {}
        for name in names:
            data = (tmp / name).read_bytes()
            entries[name] = {"sha256": _sha256(data), "bytes": len(data)}
        return self._publish(step, tmp, entries, {**meta, FORMAT: DCP})

    def _my_share(self, names: list[str] | None) -> list[str]:
        """Rank 0's list of files, cut so that each rank gets every world-th one."""
        box = [names]
        dist.broadcast_object_list(box, src=0)
        return (box[0] or [])[self.rank :: dist.get_world_size()]

    def _publish(self, step: int, tmp: Path, entries: dict[str, dict[str, Any]],
                 meta: dict[str, Any]) -> Path:
        gathered: list[dict[str, dict[str, Any]] | None] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, entries)
        final = self.dir / f"step-{step}"
        if self.rank == 0:
            files: dict[str, dict[str, Any]] = {}
            for part in gathered:
                files.update(part or {})
            manifest = {"step": step, "files": files, "meta": meta, "time": time.time()}
            tmp.mkdir(parents=True, exist_ok=True)
            write_atomic(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
            if final.exists():  # a dead run's (maybe corrupt) checkpoint of this step
                shutil.rmtree(final)
            os.rename(tmp, final)
            _fsync_dir(self.dir)
            write_atomic(self.dir / LATEST, f"{final.name}\n".encode())
            self._prune(final.name)
        return final

    def _prune(self, newest: str) -> None:
        if self.keep <= 0:
            return
        steps = sorted(
            (s, p) for p in self.dir.iterdir() if (s := _step_of(p.name)) is not None
        )
        for _, path in steps[: -self.keep]:
            if path.name != newest:
                shutil.rmtree(path, ignore_errors=True)

    def _candidates(self) -> list[tuple[str, dict[str, Any]]]:
        """Complete checkpoints, best first: ``latest``'s target, then newest step first."""
        if not self.dir.is_dir():
            return []
        names = sorted(
            (p.name for p in self.dir.iterdir() if _step_of(p.name) is not None),
            key=lambda n: -(_step_of(n) or 0),
        )
        try:
            pointed = (self.dir / LATEST).read_text().strip()
        except OSError:
            pointed = ""
        if pointed in names:
            names.remove(pointed)
            names.insert(0, pointed)
        found = []
        for name in names:
            try:
                manifest = json.loads((self.dir / name / MANIFEST).read_text())
                found.append((name, manifest))
            except (OSError, ValueError) as e:
                _warn(f"checkpoint {self.dir / name} has no readable manifest ({e}); skipped")
        return found

    def newest_step(self) -> int | None:
        """The step of the newest checkpoint with a manifest (not verified), or None."""
        return max((m.get("step", 0) for _, m in self._candidates()), default=None)

    def _read(self, name: str, manifest: dict[str, Any], want: Sequence[str]) -> dict[str, Any]:
        shards = {}
        for shard in want:
            entry = manifest["files"].get(f"{shard}.pt")
            if entry is None:
                raise ValueError(f"shard {shard} is not in the manifest")
            data = (self.dir / name / f"{shard}.pt").read_bytes()
            if _sha256(data) != entry["sha256"]:
                raise ValueError(f"{shard}.pt does not match its sha256")
            shards[shard] = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        return shards

    def load(self, want: Sequence[str], device: torch.device | None = None) -> Loaded | None:
        """Load the newest checkpoint whose shards every rank can read and verify.

        ``want``: the shards this rank needs (may be empty). Returns None when
        there is no usable checkpoint. ``device`` carries the agreement flag
        (the current CUDA device with NCCL).
        """
        candidates = [self._candidates() if self.rank == 0 else None]
        dist.broadcast_object_list(candidates, src=0)
        for name, manifest in candidates[0] or []:
            shards: dict[str, Any] = {}
            try:
                shards = self._read(name, manifest, want)
                ok = 1
            except Exception as e:  # missing, truncated, corrupt, unpicklable: all mean "older"
                _warn(f"checkpoint {self.dir / name} unusable on rank {self.rank}: {e}")
                ok = 0
            flag = torch.tensor([ok], dtype=torch.int32, device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
            if flag.item() == 1:
                return Loaded(manifest["step"], name, shards, manifest.get("meta", {}))
            if self.rank == 0:
                _warn(f"checkpoint {name} rejected; trying an older one")
        return None

    def load_dcp(self, read: Callable[[Path], None],
                 device: torch.device | None = None) -> Loaded | None:
        """Load the newest DCP checkpoint that verifies: ``read(directory)`` (a collective,
        e.g. ``dcp.load``) runs once every rank checked its share of the files.

        Any world size can read what any other wrote (DCP reshards); a checkpoint
        that fails to verify, or that ``read`` rejects, gives way to the next older.
        """
        candidates = [self._candidates() if self.rank == 0 else None]
        dist.broadcast_object_list(candidates, src=0)
        for name, manifest in candidates[0] or []:
            ok = 1
            try:
                if manifest.get("meta", {}).get(FORMAT) != DCP:
                    raise ValueError("not a DCP checkpoint (another workload's?)")
                files = sorted(manifest["files"])
                for file in files[self.rank :: dist.get_world_size()]:
                    data = (self.dir / name / file).read_bytes()
                    if _sha256(data) != manifest["files"][file]["sha256"]:
                        raise ValueError(f"{file} does not match its sha256")
            except Exception as e:
                _warn(f"checkpoint {self.dir / name} unusable on rank {self.rank}: {e}")
                ok = 0
            flag = torch.tensor([ok], dtype=torch.int32, device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MIN)
            if flag.item() == 1:
                try:
                    read(self.dir / name)
                    meta = manifest.get("meta", {})
                    return Loaded(manifest["step"], name, {}, meta)
                except Exception as e:  # DCP's load fails on every rank alike
                    _warn(f"checkpoint {self.dir / name} did not load: "
                          f"{' '.join(str(e).split())[:300]}")
            if self.rank == 0:
                _warn(f"checkpoint {name} rejected; trying an older one")
        return None


def _warn(message: str) -> None:
    print(f"kdist.checkpoint: {message}", file=sys.stderr, flush=True)
