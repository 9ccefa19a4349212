"""kdist's worker hook: ``collectiveTimeoutSeconds`` becomes torch's default timeout.

Python's ``site`` imports this in every kdist worker (its directory is first
on ``PYTHONPATH``: ``kdist.runtime.worker_exec``), before the script runs.
torch has no variable for the default process-group timeout (30 minutes for
gloo, 10 for NCCL); a script that passes none to ``init_process_group`` or
``new_group`` (most do) would wait that long on a silent peer. So when
``torch.distributed.constants`` is first imported (by ``import torch``), its
``default_pg_timeout`` and ``default_pg_nccl_timeout`` are set to
``KDIST_PG_TIMEOUT`` seconds; ``distributed_c10d`` and libraries (Lightning
reads the constant) take them from there. A timeout the script passes itself
still wins.

This module shadows any other ``sitecustomize`` (an image may ship one), so
it runs that one too, afterwards. Standard library only; never fails the
worker: a problem is one line on stderr.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from datetime import timedelta
from typing import Any

TARGET = "torch.distributed.constants"
PG_TIMEOUT = "KDIST_PG_TIMEOUT"  # kdist.shared.env.PG_TIMEOUT; this file imports nothing of kdist


def patch(module: Any, timeout: timedelta) -> None:
    """Set both default timeouts of a loaded ``torch.distributed.constants``."""
    module.default_pg_timeout = timeout
    if isinstance(getattr(module, "default_pg_nccl_timeout", None), timedelta):
        module.default_pg_nccl_timeout = timeout


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then ``patch``; anything else is the real loader's."""

    def __init__(self, loader: Any, timeout: timedelta) -> None:
        self._loader, self._timeout = loader, timeout

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        patch(module, self._timeout)

    def __getattr__(self, name: str) -> Any:  # get_source (tracebacks), is_package, ...
        return getattr(self._loader, name)


class PgTimeoutFinder:
    """A meta-path finder that answers only for ``torch.distributed.constants``, once."""

    def __init__(self, timeout: timedelta) -> None:
        self.timeout = timeout

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader, self.timeout)
        return spec


def install(environ: Any = os.environ) -> None:
    seconds = (environ.get(PG_TIMEOUT) or "").strip()
    if not seconds:
        return
    timeout = timedelta(seconds=int(seconds))
    loaded = sys.modules.get(TARGET)
    if loaded is not None:  # too late for distributed_c10d's copy, not for later readers
        patch(loaded, timeout)
        return
    sys.meta_path.insert(0, PgTimeoutFinder(timeout))


def chain() -> None:
    """Run the next ``sitecustomize`` on ``sys.path`` (the image's), which this one shadows."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == __file__:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


for _step in (install, chain):
    try:
        _step()
    except Exception as _e:  # a worker must start whatever happens here
        print(f"kdist: sitecustomize: {_step.__name__}: {type(_e).__name__}: {_e}",
              file=sys.stderr)
