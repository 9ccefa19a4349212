"""Reading a job file: `load_job(path)` returns a `TrainingJob` or raises `SpecError`
carrying every problem found, each as `FILE: field.path: what`."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from kdist import backends
from kdist.shared.errors import SpecError
from kdist.shared.readfile import read_bounded
from kdist.spec import workloads as W
from kdist.spec.checks import ENV_NAME
from kdist.spec.launchers import launcher_problem
from kdist.spec.model import TrainingJob
from kdist.spec.yamlsafe import MAX_BYTES, YamlProblem, load_document


def advice(job: TrainingJob, *, local: bool = False) -> list[str]:
    """Valid but probably not meant: one line each, `field.path: why`, for the CLI to warn.
    `local`: only what holds for a local run too (no pods, checkpoints in .kdist/)."""
    s, w = job.spec, job.spec.workload
    out = []
    every = W.checkpoint_every_ignored(w.module, w.args, s.checkpoint is not None)
    if every is not None:
        out.append(f"spec.workload.args[{every}]: --checkpoint-every is given but no checkpoint "
                   "will be written: there is no spec.checkpoint (nor --checkpoint-dir)")
    if local:
        return out
    found = W.script_of(w.command, w.args)
    if found is not None and s.workdir is None:
        where, script = found
        name = (w.command if where == "command" else w.args)[script]  # type: ignore[index]
        out.append(f"spec.workload.{where}[{script}]: {name!r} is a relative path and there is "
                   "no spec.workdir: the pods look for it in the image (a local run finds it "
                   "through the current directory); ship it with spec.workdir or --workdir")
    ephemeral = s.checkpoint is not None and s.checkpoint.volume.empty_dir is not None
    if s.distributed.max_restarts and ephemeral:
        out.append("spec.checkpoint.volume: an emptyDir is new with every pod, so a restarted "
                   "job starts from step 0; use a persistentVolumeClaim every pod mounts")
    caveats = backends.get(s.backend).caveats
    if caveats:  # what the spec's auto fields cannot become there
        out.append(f"spec.backend: {s.backend}: {caveats}")
    unbounded = backends.get(s.backend).unbounded_restarts
    if unbounded and s.distributed.max_restarts and not s.active_deadline_seconds:
        out.append(f"spec.distributed.maxRestarts: {unbounded}; set "
                   "spec.activeDeadlineSeconds to bound a job that keeps failing")
    return out


#: The file name that means standard input, as kubectl's `-f -`.
STDIN = "-"


def source_name(path: str | os.PathLike[str]) -> str:
    """How messages name a job file: `<stdin>` for "-"."""
    return "<stdin>" if str(path) == STDIN else str(path)


def load_job(path: str | Path) -> TrainingJob:
    """Read and validate a job file ("-": standard input); raise SpecError with every
    problem found."""
    if str(path) == STDIN:
        import sys

        # A relative spec.workdir is then relative to the current directory.
        return parse_job(sys.stdin.buffer.read(MAX_BYTES + 1), source=source_name(path))
    path = Path(path)
    try:
        data = read_bounded(path, MAX_BYTES)
    except OSError as e:
        raise SpecError([f"{path}: cannot read: {e.strerror or e}"]) from None
    except ValueError as e:
        raise SpecError([f"{path}: cannot read: {e}"]) from None
    return with_workdir_base(parse_job(data, source=str(path)), path.parent)


def with_workdir_base(job: TrainingJob, base: str | Path) -> TrainingJob:
    """The job with a relative spec.workdir made relative to `base` (the job file's directory).

    The spec says "relative to the job file", so `kdist submit dir/job.yaml` ships
    `dir/code` whatever the current directory; text parsed without a file stays
    relative to the current directory.
    """
    workdir = job.spec.workdir
    if workdir is None or os.path.isabs(workdir) or str(base) in ("", "."):
        return job
    spec = job.spec.model_copy(update={"workdir": os.path.join(base, workdir)})
    return job.model_copy(update={"spec": spec})


def workdir_as_written(path: str | Path) -> str | None:
    """spec.workdir of a job file as written, relative to the file as load_job makes it, for a
    file whose spec did not validate (so validate checks the workdir too); None without one."""
    path = Path(path)
    try:
        doc = load_document(read_bounded(path, MAX_BYTES))
    except (OSError, ValueError, YamlProblem):
        return None
    spec = doc.get("spec") if isinstance(doc, dict) else None
    workdir = spec.get("workdir") if isinstance(spec, dict) else None
    if not isinstance(workdir, str) or not workdir.strip() or "\0" in workdir:
        return None
    base = str(path.parent)
    return workdir if os.path.isabs(workdir) or base in ("", ".") else os.path.join(base, workdir)


def parse_job(data: bytes | str, source: str = "<job>") -> TrainingJob:
    """Validate job text already in memory; `source` names it in messages."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        doc = load_document(data)
    except YamlProblem as e:
        raise SpecError([f"{source}: {e}"]) from None
    if not isinstance(doc, dict):
        kind = type(doc).__name__ if doc is not None else "nothing"
        raise SpecError([f"{source}: expected a mapping with apiVersion, kind, metadata, spec; "
                         f"got {kind}"])
    return validate_job(doc, source)


def validate_job(doc: dict[str, Any], source: str = "<job>") -> TrainingJob:
    """Validate an already-parsed document."""
    try:
        job = TrainingJob.model_validate(doc)
    except ValidationError as e:
        problems = _problems(e, doc) + _launcher_as_written(doc)
        raise SpecError([f"{source}: {p}" for p in problems]) from None
    problems = workload_problems(job)
    if problems:
        raise SpecError([f"{source}: {p}" for p in problems])
    return job


def workload_problems(job: TrainingJob) -> list[str]:
    """What kdist's own workload (a module under kdist.workloads.) would refuse on the pods:
    an unknown module, unknown or malformed args; torch-free (kdist.spec.workloads). And a
    launcher (torchrun, ...) in the workload, which would start a world per process."""
    w = job.spec.workload
    launcher = launcher_problem(w.module, w.command, w.args, job.spec.nodes,
                                job.spec.procs_per_node)
    if launcher:
        return [launcher]
    bad = W.module_problem(w.module)
    if bad:
        return [f"spec.workload.module: {bad}"]
    return [f"spec.workload.args[{i}]: {why}" for i, why in W.args_problems(w.module, w.args)]


def _launcher_as_written(doc: dict[str, Any]) -> list[str]:
    """A launcher in a workload whose spec did not validate (every problem at once)."""
    spec = doc.get("spec")
    w = spec.get("workload") if isinstance(spec, dict) else None
    if not isinstance(w, dict):
        return []
    module, command, args = w.get("module"), w.get("command"), w.get("args", [])
    lists = [x for x in (command, args) if x is not None]
    if not isinstance(module, (str, type(None))) or not all(
            isinstance(x, list) and all(isinstance(a, str) for a in x) for x in lists):
        return []
    nodes, procs = spec.get("nodes", 1), spec.get("procsPerNode", 1)  # type: ignore[union-attr]
    why = launcher_problem(module, command, args,
                           nodes if type(nodes) is int and nodes > 0 else 1,
                           procs if type(procs) is int and procs > 0 or procs == "auto" else 1)
    return [why] if why else []


def _problems(err: ValidationError, doc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for item in err.errors(include_url=False):
        loc = _clean_loc(item["loc"])
        message = _message(dict(item), loc, doc)
        # a cross-field check that names its field in full ("spec.minNodes: ...") says it once
        named = loc and message.startswith(f"{_path(loc)}.")
        line = f"{_path(loc)}: {message}" if loc and not named else message
        if line not in out:
            out.append(line)
    return out


def _clean_loc(loc: tuple[Any, ...]) -> list[Any]:
    # Unions add the branch's type name to the path (`int`, `literal['auto']`);
    # users never wrote those, so drop them.
    tags = ("int", "str", "literal[", "constrained-", "function-", "json-or-python")
    return [
        p for p in loc
        if p != "[key]" and not (isinstance(p, str) and p.startswith(tags) and p != "str")
    ]


def _path(loc: list[Any]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif ENV_NAME.fullmatch(str(part)) and "." not in str(part):
            text += f".{part}" if text else str(part)
        else:
            text += f"[{str(part)!r}]"
    return text


def _message(item: dict[str, Any], loc: list[Any], doc: dict[str, Any]) -> str:
    kind, ctx = item["type"], item.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "unknown field" + _suggest(loc, doc)
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}, got {item.get('input')!r}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        op = {"greater_than_equal": ">=", "less_than_equal": "<=",
              "greater_than": ">", "less_than": "<"}[kind]
        bound = next(iter(ctx.values()), "")
        return f"must be {op} {bound}, got {item.get('input')!r}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer, got {_short(item.get('input'))}"
    if kind in ("string_type", "str_type"):
        hint = " (quote it in YAML)" if isinstance(item.get("input"), bool) else ""
        return f"must be a string, got {_short(item.get('input'))}{hint}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping, got {_short(item.get('input'))}"
    if kind == "list_type":
        return f"must be a list, got {_short(item.get('input'))}"
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false, got {_short(item.get('input'))}"
    if kind == "value_error":
        return str(ctx.get("error", item["msg"]))
    if kind == "string_too_long":
        return f"is longer than {ctx.get('max_length')} characters"
    return item["msg"]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _suggest(loc: list[Any], doc: dict[str, Any]) -> str:
    """'did you mean X' for a misspelt field, from the model's own field names."""
    if not loc or not isinstance(loc[-1], str):
        return ""
    model: Any = TrainingJob
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = _field(model, part)
        if field is None:
            return ""
        model = _model_of(field.annotation)
        if model is None:
            return ""
    names = [f.alias or n for n, f in model.model_fields.items()]
    match = difflib.get_close_matches(loc[-1], names, n=1)
    return f" (did you mean {match[0]!r}?)" if match else f" (known: {', '.join(names)})"


def _field(model: Any, name: str) -> Any:
    for n, f in model.model_fields.items():
        if name in (n, f.alias):
            return f
    return None


def _model_of(annotation: Any) -> Any:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None
