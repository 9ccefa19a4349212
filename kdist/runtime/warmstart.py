"""Whether a job's first workers start from standbys although warm workers were not asked.

A standby (``kdist.runtime.standby``) imports torch while the launcher meets the other
nodes and unpacks the shipped code, so the pod's first step comes that much sooner;
the first start's standby becomes the worker, so nothing is kept for the job's life
(``spec.distributed.warmWorkers`` keeps one behind each worker). Without being asked,
the launcher does it only where it cannot cost the script anything:

- the script imports torch (or a library that does: Lightning, accelerate,
  transformers, DeepSpeed, kdist's own workloads). A standby hands over only once torch
  is imported: a script without torch would wait for an import it never needed;
- nothing before that import mentions the environment (``os.environ``, ``putenv``): a
  script that sets ``OMP_NUM_THREADS`` or a ``TORCH_*`` variable before importing torch
  would find torch already imported with the pod's.

Asked by ``spec.distributed.warmStart`` (``KDIST_WARM_WORKERS=first``; off by default: under
a pod's CPU limit the import's CPU is the wait, so it gained nothing measurable on the
cluster). Everything else starts cold, as it always did. The script is read, never
imported: a ``-m`` module is looked for as a file on the worker's ``sys.path`` (its
working directory, ``PYTHONPATH``, then the launcher's own entries), and kdist's own
modules (``kdist.*``) are known to use torch.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from kdist.runtime.sitehook import _kdist_standby as entry

#: An import of torch, or of a library every use of which imports it first.
TORCH_IMPORT = re.compile(
    r"^[ \t]*(?:import|from)[ \t]+(?:torch|lightning|pytorch_lightning|accelerate|transformers"
    r"|deepspeed|kdist)\b", re.M)
#: What a script may use to change what torch reads as it is imported.
ENVIRON = re.compile(r"\benviron\b|\bputenv\b")
#: What such a standby imports ahead: torch alone (``torch._dynamo``, which DDP and every
#: optimizer import, is the script's to import or not, as cold: its memory and its CPU
#: are not spent on a script that does without).
PRELOAD = ("torch",)
#: The most of a script read to decide.
MAX_SOURCE = 1 << 20
OWN = "kdist."


def uses_torch_first(source: str) -> bool:
    """Whether ``source`` imports torch (or a library built on it) with no mention of the
    environment before that import."""
    found = TORCH_IMPORT.search(source)
    return found is not None and ENVIRON.search(source, 0, found.start()) is None


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            return f.read(MAX_SOURCE).decode(errors="replace")
    except OSError:
        return None


def _module_source(name: str, cwd: str, environ: Mapping[str, str]) -> str | None:
    """The source ``python -m name`` would run, found as a file (never imported)."""
    parts = name.split(".")
    pythonpath = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for base in [cwd, *pythonpath, *[p for p in sys.path[1:] if p]]:
        where = Path(cwd, base).joinpath(*parts)
        for path in (where.with_suffix(".py"), where / "__main__.py"):
            if path.is_file():
                return _read(path)
    return None


def own(argv: Sequence[str]) -> bool:
    """Whether this worker command runs one of kdist's own modules (``-m kdist.*``)."""
    found = entry.command(list(argv))
    return found is not None and found[0] == "module" and found[1].startswith(OWN)


def first_start(argv: Sequence[str], environ: Mapping[str, str], cwd: str) -> bool:
    """Whether this worker command's first start may come from a standby unasked."""
    found = entry.command(list(argv))
    if found is None:
        return False
    kind, what, _ = found
    if kind == "module" and what.startswith(OWN):
        return True
    if kind == "module":
        source = _module_source(what, cwd, environ)
    elif kind == "code":
        source = what
    else:
        source = _read(Path(cwd, what))
    return source is not None and uses_torch_first(source)
