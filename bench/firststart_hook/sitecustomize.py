"""bench.firststart's probe: each Python of a local job stamps where its first start goes.

On the workers' ``PYTHONPATH`` after kdist's own hook (which runs this one after it, as it
runs an image's ``sitecustomize``), and on the launcher's. With ``FIRSTSTART_DIR`` set,
every process appends ``WALL CPU PID WHAT`` lines to ``FIRSTSTART_DIR/stamps``: its
start (from ``/proc``, 10 ms resolution), the interpreter up (this file runs), torch's
and ``torch._dynamo``'s imports begun and done, ``init_process_group`` and DDP's
constructor called and returned. Standard library only; stamps nothing without the
variable.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import time
from typing import Any

OUT = os.environ.get("FIRSTSTART_DIR")
#: Modules whose import is stamped as it begins and ends.
IMPORTS = ("torch", "torch._dynamo")
#: (module, class or "", function, label): calls stamped as they begin and return.
CALLS = (("torch.distributed.distributed_c10d", "", "init_process_group", "init_process_group"),
         ("torch.nn.parallel.distributed", "DistributedDataParallel", "__init__", "DDP()"))


def stamp(what: str, wall: float | None = None) -> None:
    if OUT:
        with open(os.path.join(OUT, "stamps"), "a") as f:
            f.write(f"{time.time() if wall is None else wall:.3f} {time.process_time():.3f} "
                    f"{os.getpid()} {what}\n")


def _started() -> float:
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _wrap(owner: Any, name: str, label: str) -> None:
    inner = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        stamp(f"{label} called")
        try:
            return inner(*args, **kwargs)
        finally:
            stamp(f"{label} returned")
    setattr(owner, name, wrapped)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        calls = [c for c in CALLS if c[0] == name]
        if name not in IMPORTS and not calls:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            if name in IMPORTS:
                stamp(f"import {name} begun")
            run(module)
            if name in IMPORTS:
                stamp(f"import {name} done")
            for _, cls, fn, label in calls:
                _wrap(getattr(module, cls) if cls else module, fn, label)
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if OUT:
    stamp("process started", wall=_started())
    stamp("interpreter up")
    sys.meta_path.insert(0, _Finder())
