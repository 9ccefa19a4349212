"""Job files on this machine: load, pack the workdir, render, validate, run locally.

What the CLI's `validate`, `render` and `run --local` do, and what `submit`
does before its first request, with no cluster. Warnings (``spec.advice``,
skipped workdir entries) go to `warn`, one line each; without one they are
Python warnings (a notebook shows them).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from kdist.shared.errors import SpecError, UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from kdist.rendering.workdir import Packed
    from kdist.spec.model import TrainingJob

Warn = Callable[[str], None]
__all__ = ["Packed", "TrainingJob", "Validated", "load_file", "load_job", "pack_code",
           "parse_job", "pod_security", "render", "render_objects", "run_local",
           "security_note", "to_json", "to_yaml", "validate_file"]


def _python_warning(line: str) -> None:
    warnings.warn(line, UserWarning, stacklevel=4)


def load_file(file: str, namespace: str | None = None, backend: str | None = None, *,
              local: bool = False, warn: Warn | None = None) -> TrainingJob:
    """The validated job, with `namespace` and `backend` applied (refused when they contradict it).

    Warns about what is valid but probably not meant (``spec.advice``); for a
    local run only what holds without pods (its checkpoints are outside the
    spec's volume, and it finds scripts in the current directory).
    """
    from kdist.rendering import with_backend
    from kdist.spec import load_job
    from kdist.spec.load import source_name

    if namespace is not None:
        from kdist.kube.connect.config import check_namespace
        from kdist.shared.spelling import option

        check_namespace(namespace, option("namespace"))
    job = with_backend(load_job(file), backend)
    file = source_name(file)  # "-" is standard input
    if namespace and job.metadata.namespace and namespace != job.metadata.namespace:
        raise UsageError(
            f"{file}: metadata.namespace is {job.metadata.namespace!r} but -n says {namespace!r}"
        )
    if namespace and not job.metadata.namespace:
        meta = job.metadata.model_copy(update={"namespace": namespace})
        job = job.model_copy(update={"metadata": meta})
    advise(file, job, warn, local=local)
    return job


def advise(file: str, job: TrainingJob, warn: Warn | None = None, *,
           local: bool = False) -> None:
    from kdist.spec import advice

    for line in advice(job, local=local):
        (warn or _python_warning)(f"{file}: {line}")


def pack_code(job: TrainingJob, workdir: str | None = None, *,
              warn: Warn | None = None) -> Packed | None:
    """The job's code (`workdir`, else spec.workdir), packed once; None when there is none.

    What was skipped (links leaving the tree, special files) goes to `warn`;
    what cannot be shipped raises WorkdirError (exit 2) before anything is sent.
    """
    if workdir is None and job.spec.workdir is None:
        return None
    from kdist.rendering.workdir import pack_workdir

    code = pack_workdir(job, workdir)
    assert code is not None
    for line in code.warnings:
        (warn or _python_warning)(f"{code.origin}: {line}")
    missing = script_problem(job, code)
    if missing:
        raise SpecError([missing])
    return code


def script_problem(job: TrainingJob, code: Packed) -> str | None:
    """`field: why` when the script the workload names (`[python, train.py]`) is not in the
    packed workdir the workers start in; None when it is, or there is none to judge."""
    from kdist.spec.workloads import script_not_shipped, script_of

    w = job.spec.workload
    found = script_of(w.command, w.args)
    if found is None:
        return None
    where, index = found
    token = (w.command if where == "command" else w.args)[index]  # type: ignore[index]
    why = script_not_shipped(token, code.names)
    if why is None:
        return None
    return (f"spec.workload.{where}[{index}]: {token!r} is not in the workdir {code.root} "
            f"({code.origin}), where the workers start; {why}")


def pod_security(objects: list[dict[str, Any]]) -> tuple[str | None, bool]:
    """The line to say when the pods need more than Pod Security "restricted" (None: they
    do not), and whether it is loud: "privileged", which most namespaces refuse."""
    from kdist.rendering.security import PRIVILEGED, assess

    found = assess(objects)
    return found.line(), found.level == PRIVILEGED


def render_objects(job: TrainingJob, code: Packed | None = None) -> list[dict[str, Any]]:
    """`kdist.render`: every Kubernetes object of `job`, its arguments checked first (a
    path or text as `code` is a UsageError naming it, not a traceback from the renderer)."""
    from kdist.api import checks
    from kdist.rendering import render as render_job

    return render_job(checks.job(job, or_file=False), checks.code(code))


def render(job: TrainingJob | str | os.PathLike[str],
           code: Packed | None = None) -> list[dict[str, Any]]:
    """`kdist.render`: every Kubernetes object of `job`, a TrainingJob (`kdist.load_job`) or
    a job file's path (loaded, and its spec.workdir packed, as `kdist render FILE` does).
    Anything else is a UsageError naming it."""
    from kdist.api import checks

    if isinstance(job, (str, os.PathLike)):
        loaded = load_file(checks.path(job, "job"), local=False)
        return render_objects(loaded, checks.code(code) or pack_code(loaded))
    return render_objects(checks.job(job), code)


def load_job(path: str | os.PathLike[str]) -> TrainingJob:
    """`kdist.load_job`: read and validate a job file (SpecError with every problem)."""
    from kdist.api import checks
    from kdist.spec import load_job as load

    return load(checks.path(path, "path"))


def parse_job(data: str | bytes, source: str = "<job>") -> TrainingJob:
    """`kdist.parse_job`: validate job YAML already in memory; `source` names it."""
    from kdist.api import checks
    from kdist.spec import parse_job as parse

    if not isinstance(data, (str, bytes)):
        raise UsageError(f"data: expected the job's YAML as str or bytes, not "
                         f"{type(data).__name__}")
    return parse(data, checks.text(source, "source"))


def to_yaml(objects: list[dict[str, Any]]) -> str:
    """`kdist.to_yaml`: the objects (`render`'s list) as multi-document YAML."""
    from kdist.rendering import to_yaml as dump

    if not isinstance(objects, list) or not all(isinstance(o, dict) for o in objects):
        raise UsageError(f"objects: expected the list of dicts kdist.render returns, not "
                         f"{type(objects).__name__}")
    return dump(objects)


def to_json(objects: list[dict[str, Any]]) -> str:
    from kdist.rendering import to_json as dump

    return dump(objects)


@dataclass(frozen=True)
class Validated:
    """One job file that passed `validate_file`: its summary line and, when the pods need
    more than Pod Security "restricted", the note to show (a warning for "privileged")."""

    summary: str
    security_note: str | None = None


def validate_file(file: str, *, warn: Warn | None = None) -> Validated:
    """Check one job file whole: the spec, its workdir, the rendered pods.

    SpecError with every problem otherwise (those after the spec's own name the file).
    """
    from kdist.spec import load_job
    from kdist.spec.load import source_name

    say = warn or _python_warning
    try:
        job = load_job(file)
    except SpecError as e:
        raise SpecError(e.problems + _workdir_problems(source_name(file), e.problems)) from None
    file = source_name(file)  # "-" is standard input
    advise(file, job, say)
    try:
        code = pack_code(job, None, warn=say)  # a workdir that cannot be shipped is a problem
        # The overlay's merged pod and the Pod Security level need the rendered pods.
        line, loud = pod_security(render_objects(job, code))
    except SpecError as e:
        raise SpecError([f"{file}: {p}" for p in e.problems]) from None
    s = job.spec
    return Validated(
        f"{file}: ok ({s.backend}, {s.nodes} node(s) x {s.procs_per_node} proc(s), "
        f"{s.dist_backend})",
        security_note(file, line, loud))


def _workdir_problems(file: str, problems: list[str]) -> list[str]:
    """What packing the workdir of a file whose spec is invalid finds: every problem at
    once, not the workdir's only after the spec is fixed."""
    from kdist.rendering.workdir import WorkdirError, pack
    from kdist.spec.load import workdir_as_written

    root = workdir_as_written(file)
    if root is None or any(": spec.workdir:" in p for p in problems):
        return []
    try:
        pack(root)
    except WorkdirError as e:
        return [f"{file}: {p}" for p in e.problems]
    return []


def security_note(file: str, line: str | None, loud: bool) -> str | None:
    from kdist.spec.load import source_name

    return f"{'warning: ' if loud else ''}{source_name(file)}: {line}" if line else None


def run_local(job: TrainingJob, *, code: Packed | None = None,
              stdout: IO[str] | None = None, observer: Any = None,
              on_interrupt: Callable[[int], None] | None = None,
              job_file: str | None = None,
              on_ledger: Callable[[dict[str, Any]], None] | None = None,
              fresh: bool = False, on_checkpoints: Callable[[Path], None] | None = None) -> int:
    """Run `job` on this machine as `kdist run --local` does; the job's exit code.

    Its state (`.kdist/<name>`: checkpoints, the unpacked workdir) sits beside
    `job_file`, the file `job` was loaded from; without one, in the current directory.

    With an `observer` (the CLI's live table), it hears of every line and of each
    node's state as `submit`'s observer does (`kdist.api.localview`).
    `on_interrupt(signal)` hears of a Ctrl-C / SIGTERM that stopped the run (the
    exit code is then 128 + the signal). `on_ledger(ledger)` hears the run's goodput
    ledger at its end when a node restarted (as `status -o json` has a job's `ledger`).
    `fresh`: the job's local checkpoints (`.kdist/<name>/checkpoints`) are removed first;
    `on_checkpoints(dir)` hears where they are (when spec.checkpoint is set).
    """
    from kdist.local.state import state_root

    root = state_root(job_file)
    if observer is not None:
        from kdist.api.localview import run_local_watched

        return run_local_watched(job, observer, code=code, on_interrupt=on_interrupt,
                                 root=root, on_ledger=on_ledger, fresh=fresh,
                                 on_checkpoints=on_checkpoints)
    from kdist.local import run_local as run

    return run(job, code=code, stdout=stdout, on_interrupt=on_interrupt, root=root,
               on_ledger=on_ledger, fresh=fresh, on_checkpoints=on_checkpoints)
