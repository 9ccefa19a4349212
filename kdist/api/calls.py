"""`Client.train`: a Python function, or a script, on every rank; rank 0's value back.

A function travels as the file it is defined in, inside a workdir shipped as
``spec.workdir`` is (by default that file's directory: its sibling modules
come along; ConfigMaps, no registry, no image rebuild), and runs through
``python -m kdist.runtime.call`` with the env contract. A function with no
module file (a notebook cell, a closure, the running script's own) travels
as its source and must import what it uses inside itself (the script's
directory still travels); one from an installed package is imported by name.
Its arguments travel as JSON. A script runs as ``python SCRIPT ARGS...``
from its workdir (by default its directory).

Rank 0's return value comes back as JSON in its log (``kdist.shared.frames``),
at most 1 MiB: None, bool, int, float, str, lists and tuples (back as lists),
dicts with str keys. Never a pickle: whatever can write to that log (the
script, a dependency, the API server) could run code here through one; an
old-format pickled frame is refused, unread. An exception on any rank comes
back as `JobFailed` naming the rank, the exception and the remote
traceback's last lines. The job stays on the cluster (its logs and `metrics`
with it) until `delete` or its TTL.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import secrets
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from kdist.api import checks
from kdist.api.types import Connection
from kdist.shared import frames
from kdist.shared.errors import JobFailed, SpecError, UsageError
from kdist.shared.names import DNS1035_LABEL, MAX_JOB_NAME
from kdist.shared.terminal import log_for

if TYPE_CHECKING:
    from kdist.api.types import JobState
    from kdist.rendering.workdir import Packed
    from kdist.spec.model import TrainingJob

#: kdist's CPU training image (`make image`), as `kdist init`'s starter job names it.
DEFAULT_IMAGE = "kdist-train:dev-cpu"
#: The function's JSON arguments (or its source) travel in the pod's command line.
MAX_CALL_BYTES = 64 * 1024
#: Lines of a finished rank's log read back when its frames did not arrive streamed.
TAIL_LINES = frames.MAX_CHUNKS + 200


@dataclass(frozen=True)
class TrainCall:
    """The job that runs it, its packed workdir, and what runs (for messages)."""

    job: TrainingJob
    code: Packed | None
    what: str
    returns: bool  # a function's value comes back; a script's is None

    @classmethod
    def make(cls, fn: Any, *, nodes: Any, procs_per_node: Any, args: Any, image: Any,
             backend: str, workdir: Any, name: Any, env: Any, namespace: str | None,
             resources: Any = None, spec: Any = None) -> TrainCall:
        """Check every argument and build the job; nothing is sent (UsageError, SpecError)."""
        from kdist.spec import validate_job

        checks.count(nodes, "nodes", 1, 10_000)
        checks.count(procs_per_node, "procs_per_node", 1, 64)
        image = DEFAULT_IMAGE if image is None else checks.text(image, "image")
        env = _mapping(env, "env")
        workdir = None if workdir is None else checks.path(workdir, "workdir")
        root: Path | None
        if isinstance(fn, (str, os.PathLike)):
            root, command, what = _script(fn, workdir, args)
        elif callable(fn):
            root, command, what = _function(fn, workdir, args)
        else:
            raise UsageError(f"fn: expected a function or a script's path, not "
                             f"{type(fn).__name__} {fn!r}")
        job_name = _name(name, what)
        body: dict[str, Any] = {
            "backend": backend, "image": image, "nodes": nodes, "procsPerNode": procs_per_node,
            "workload": {"command": command}, "distributed": {"backend": "gloo"},
            "resources": _mapping(resources, "resources") or {"cpu": "1", "memory": "2Gi"},
        }
        if env:
            body["env"] = env
        extra = _mapping(spec, "spec")
        if "workload" in extra:
            raise UsageError("spec: the workload is the function or script train() runs")
        body.update(extra)
        meta: dict[str, Any] = {"name": job_name}
        if namespace:
            meta["namespace"] = namespace
        job = validate_job({"apiVersion": "kdist/v1alpha1", "kind": "TrainingJob",
                            "metadata": meta, "spec": body}, source="train()")
        return cls(job, _pack(root) if root is not None else None, what,
                   returns=not isinstance(fn, (str, os.PathLike)))


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise UsageError(f"{what}: expected a dict with string keys, not {value!r}")
    return dict(value)


def _name(name: Any, what: str) -> str:
    if name is not None:
        return checks.name(name)
    stem = "".join(c if c.isalnum() else "-" for c in what.lower()).strip("-")
    stem = "-".join(p for p in stem.split("-") if p)[:MAX_JOB_NAME - 12].strip("-")
    if not stem or not DNS1035_LABEL.fullmatch(stem[0] + "a"):
        stem = f"train-{stem}".strip("-")
    out = f"{stem}-{secrets.token_hex(3)}"
    return checks.name(out if DNS1035_LABEL.fullmatch(out) else f"train-{secrets.token_hex(3)}")


def _within(root: Path, file: Path, what: str) -> str:
    try:
        return file.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        raise UsageError(f"workdir: {root} does not hold {file}, {what}") from None


def _script(fn: Any, workdir: Any, args: Any) -> tuple[Path, list[str], str]:
    path = Path(os.fspath(fn))
    if not path.is_file():
        raise UsageError(f"fn: {path} is not a file (a script to run, or pass a function)")
    root = Path(os.fspath(workdir)) if workdir is not None else path.parent
    rel = _within(root, path, "the script")
    if args is None:
        args = []
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence) or \
            not all(isinstance(a, str) for a in args):
        raise UsageError(f"args: a script's arguments are a list of strings, not {args!r}")
    return root, ["python", rel, *args], path.stem


def _function(fn: Callable[..., Any], workdir: Any,
              args: Any) -> tuple[Path | None, list[str], str]:
    qualname = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if not isinstance(qualname, str) or not isinstance(module, str):
        raise UsageError(f"fn: {fn!r} has no module and name to find it by on the ranks")
    if "<lambda>" in qualname:
        raise UsageError("fn: a lambda cannot travel to the ranks; define it with def")
    file = getattr(sys.modules.get(module), "__file__", None)
    root = None if workdir is None else Path(os.fspath(workdir))
    call: dict[str, Any] = {"qualname": qualname}
    if "<locals>" in qualname or not file or module == "__main__":
        # A script's own functions travel as source too: loading its file on the ranks
        # would run the script's top level (its own train() call) again.
        if file and root is None and module == "__main__":
            root = Path(file).parent
        try:
            lines, first = inspect.getsourcelines(fn)
        except (OSError, TypeError):
            raise UsageError(f"fn: {qualname} has neither a file nor a source kdist can "
                             "read; define it in a module") from None
        call["source"] = textwrap.dedent("".join(lines))
        call["qualname"] = getattr(fn, "__name__", qualname)
        # Where the source sits, so the ranks' tracebacks say `fit.py:12`, as here.
        call.update(line=first, source_file=_source_file(fn, root))
    elif root is None and _installed(file):
        call["module"] = module
    else:
        root = root or Path(file).parent
        call.update(file=_within(root, Path(file), f"the file of {qualname}"), module=module)
    positional, keywords = _call_args(args)
    call.update(args=positional, kwargs=keywords)
    text = base64.b64encode(json.dumps(call).encode()).decode("ascii")
    if len(text) > MAX_CALL_BYTES:
        raise UsageError(f"args: the call takes {len(text):,} bytes encoded, at most "
                         f"{MAX_CALL_BYTES:,}; ship data in the workdir or on a volume")
    return root, ["python", "-m", "kdist.runtime.call", text], qualname


def _source_file(fn: Callable[..., Any], root: Path | None) -> str | None:
    """The file `fn` was defined in, as the ranks find it: relative to the workdir that
    travels when it is in there, else its name alone (a traceback still says which file);
    None without a real file (a notebook cell)."""
    code = getattr(fn, "__code__", None)
    file = getattr(code, "co_filename", None)
    if not isinstance(file, str) or not os.path.isfile(file):
        return None
    if root is not None:
        try:
            return Path(file).resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            pass
    return Path(file).name


def _installed(file: str) -> bool:
    return any(part in ("site-packages", "dist-packages") for part in Path(file).parts)


def _call_args(args: Any) -> tuple[list[Any], dict[str, Any]]:
    if args is None:
        return [], {}
    if isinstance(args, Mapping):
        positional, keywords = [], dict(args)
        if not all(isinstance(k, str) for k in keywords):
            raise UsageError("args: keyword names must be strings")
    elif isinstance(args, (list, tuple)):
        positional, keywords = list(args), {}
    else:
        raise UsageError(f"args: a function's arguments are a list (positional) or a dict "
                         f"(keywords), not {type(args).__name__}")
    try:
        json.dumps([positional, keywords], allow_nan=False)
    except (TypeError, ValueError) as e:
        raise UsageError(f"args: they travel as JSON, and {e}") from None
    return positional, keywords


def _pack(root: Path) -> Packed:
    from dataclasses import replace

    from kdist.rendering.workdir import FIELD, pack

    try:
        packed = pack(root)
    except SpecError as e:
        raise type(e)([("workdir" + p[len(FIELD):]) if p.startswith(FIELD) else p
                       for p in e.problems]) from None
    return replace(packed, origin="workdir")


# ---- running it --------------------------------------------------------------------------


class _Lines:
    """Where the ranks' lines go: frames are taken, the rest echoed (when `echo`)."""

    def __init__(self, echo: IO[str] | None) -> None:
        self.echo = echo
        self.by_rank: dict[int, frames.Frames] = {}

    def take(self, rank: int, line: str) -> bool:
        return self.by_rank.setdefault(rank, frames.Frames()).feed(line)

    def errors(self) -> list[dict[str, Any]]:
        return [e for f in self.by_rank.values() for e in f.errors]


class _Tee(_Lines):
    """`run_local`'s stdout: `[rank N] line` (every rank's lines in one stream)."""

    def __init__(self, echo: IO[str] | None) -> None:
        super().__init__(echo)
        self._buf = ""

    def write(self, text: str) -> int:
        self._buf += text
        *lines, self._buf = self._buf.split("\n")
        for line in lines:
            if not self.take(0, line) and self.echo is not None:
                self.echo.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        if self.echo is not None:
            self.echo.flush()


class _Watcher(_Lines):
    """An Observer of `follow`: each node rank's lines, frames apart."""

    def start(self, state: JobState) -> None: ...
    def update(self, state: JobState) -> None: ...
    def tick(self, state: JobState) -> None: ...
    def stop(self) -> None: ...

    def warning(self, text: str) -> None:
        print(f"warning: {text}", file=sys.stderr, flush=True)

    def log(self, rank: int | None, line: str) -> None:
        if rank is not None and not self.take(rank, line) and self.echo is not None:
            # On a terminal, the line's colours and nothing else (kdist.shared.terminal).
            print(f"[rank {rank}] {log_for(self.echo, line)}", file=self.echo, flush=True)


def train(conn: Connection, call: TrainCall, *, local: bool, timeout: float | None,
          logs: bool) -> Any:
    echo = sys.stdout if logs else None
    if local:
        if timeout is not None:
            raise UsageError("timeout: a local run has none (Ctrl-C stops it)")
        from kdist.api.files import run_local

        tee = _Tee(echo)
        stopped: list[int] = []
        code = run_local(call.job, code=call.code, stdout=tee,  # type: ignore[arg-type]
                         on_interrupt=stopped.append)
        if stopped:  # Ctrl-C in a notebook: interrupted, as any cell is, not a failed job
            from kdist.shared.signals import Interrupted

            raise Interrupted(stopped[0])
        if code == 0:
            return _value(tee, 0, call)
        from kdist.shared.exitcodes import describe

        raise _failure(tee, f"{call.what} failed: exit code {code}, {describe(code)}")
    from kdist.api.jobs import follow, submit

    sub = submit(conn, call.job, wait=False, code=call.code)
    watcher = _Watcher(echo)
    state = follow(conn.cluster(), sub.objects[0], watcher, logs=True, timeout=timeout,
                   drain=15.0)
    if state.outcome == "Succeeded":
        if call.returns and (0 not in watcher.by_rank or watcher.by_rank[0].result() is None):
            _read_back(conn, state, 0, watcher)
        return _value(watcher, 0, call)
    if not watcher.errors() and (bad := state.first_failure()) is not None:
        _read_back(conn, state, bad.rank, watcher, bad.pod)
    raise _failure(watcher, state.failure_line())


def _read_back(conn: Connection, state: JobState, rank: int, lines: _Lines,
               pod: str | None = None) -> None:
    """Read a rank's log tail for frames the stream did not deliver (a cut follow)."""
    from kdist import backends
    from kdist.shared.errors import KdistError

    pod = pod or (state.ranks[rank].pod if rank in state.ranks else "")
    if not pod:
        return
    try:
        for line in conn.cluster().read_log(pod, state.namespace, tail=TAIL_LINES,
                                            container=backends.container(state.backend)):
            lines.take(rank, line)
    except KdistError:
        pass  # the pod is gone: what the stream brought is all there is


def _value(lines: _Lines, rank: int, call: TrainCall) -> Any:
    if not call.returns:
        return None
    got = lines.by_rank.get(rank, frames.Frames())
    payload = got.result()
    where = f"(job {call.job.metadata.name})"
    if payload is None and got.pickled:
        raise JobFailed(f"{call.what} succeeded on every rank, but rank 0's return value came "
                        f"as pickled {frames.PICKLED_RESULT} lines, which kdist never loads "
                        "(unpickling log text could run code on this machine): the image's "
                        f"kdist is older than this one; install the same version there {where}")
    if payload is None:
        raise JobFailed(f"{call.what} succeeded on every rank, but rank 0's return value did "
                        f"not come back in its log {where}")
    try:
        return frames.decode(payload)
    except ValueError as e:
        raise JobFailed(f"{call.what} succeeded on every rank, but rank 0's return value "
                        f"cannot be read: {e} {where}") from None


def _failure(lines: _Lines, fallback: str) -> JobFailed:
    errors = lines.errors()
    if not errors:
        return JobFailed(fallback)
    first = errors[0]
    trace = [str(t) for t in first.get("traceback") or []]
    where = f" ({first['where']})" if isinstance(first.get("where"), str) else ""
    return JobFailed("\n".join([f"rank {first['rank']} raised {first.get('type')}: "
                                f"{first.get('message')}{where}", *trace[-6:]]))
