"""The Python API's arguments, checked before any request, with the CLI's words.

Each check raises `UsageError` (exit code 2) naming the keyword, as the CLI
names the flag: `timeout=nan` is refused as `--timeout nan` is, a string
where a list of names belongs is refused rather than read letter by letter,
and a number where a name belongs is not "empty". What is only used later is
checked first too: an observer lacking a method would fail once the job was
created, a `code=` that is no packed workdir inside the renderer, a selector
the API server would refuse after discovery requests.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

from kdist.shared.args import int_range_problem, seconds_problem
from kdist.shared.errors import UsageError
from kdist.shared.names import job_name_problem, namespace_problem
from kdist.shared.target import ClusterOptions

if TYPE_CHECKING:
    from kdist.rendering.workdir import Packed
    from kdist.spec.model import TrainingJob

#: Names kdist looks up may be any DNS-1035 label a Job or PyTorchJob can have.
LOOKUP_NAME_LIMIT = 63
#: As the CLI's --tail and --rank.
MAX_TAIL = 10_000_000
MAX_RANK = 100_000


def name(value: Any, what: str = "name") -> str:
    """`value` if it can name a job; UsageError otherwise."""
    if not isinstance(value, str):
        raise UsageError(f"{what}: a job name is a string, not {type(value).__name__} "
                         f"{value!r}")
    problem = job_name_problem(value, LOOKUP_NAME_LIMIT)
    if problem:
        raise UsageError(problem)
    return value


def names(value: Any, what: str = "names") -> list[str]:
    """A list of job names: a string (which would be read letter by letter) is refused."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise UsageError(f"{what}: give a list of job names, not {type(value).__name__} "
                         f"{value!r}")
    out = [name(v, what) for v in value]
    if len(set(out)) != len(out):
        raise UsageError(f"{what}: a job is named twice")
    return out


def seconds(value: Any, what: str) -> float | None:
    """None, or a positive, finite number of seconds of at most a week (as --timeout)."""
    if value is None:
        return None
    problem = seconds_problem(value) if not isinstance(value, str) else \
        f"{value!r} is not a number of seconds"
    if problem:
        raise UsageError(f"{what}: {problem}")
    return float(value)


def count(value: Any, what: str, low: int = 0, high: int = MAX_TAIL) -> int | None:
    """None, or a whole number in [low, high] (as --tail and --rank)."""
    if value is None:
        return None
    problem = int_range_problem(value, low, high)
    if problem:
        raise UsageError(f"{what}: {problem}")
    return int(value)


def ranks(value: Any, what: str = "ranks") -> set[int] | None:
    """None (every rank), or a collection of node ranks."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise UsageError(f"{what}: give node ranks as a list of integers, not "
                         f"{type(value).__name__} {value!r}")
    out = {count(v, what, 0, MAX_RANK) for v in value}
    if not out:
        raise UsageError(f"{what}: an empty list selects no rank (None means every rank)")
    return {r for r in out if r is not None}


def flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{what}: expected True or False, not {value!r}")
    return value


def choice(value: Any, what: str, choices: Collection[str | None]) -> Any:
    if value not in choices or isinstance(value, bool):
        shown = ", ".join(repr(c) for c in choices)
        raise UsageError(f"{what}: {value!r} is not one of {shown}")
    return value


def text(value: Any, what: str) -> str:
    """A string argument (a label selector): text, without NUL or non-encodable characters."""
    if not isinstance(value, str):
        raise UsageError(f"{what}: expected a string, not {type(value).__name__} {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"{what}: {value!r} is not valid UTF-8 text") from None
    if "\0" in value:
        raise UsageError(f"{what}: {value!r} holds a NUL character")
    return value


def selector(value: Any, what: str = "selector") -> str:
    """A label selector the API server would parse ("" selects everything), as -l is."""
    from kdist.shared.selectors import SelectorProblem, check_selector

    try:
        return check_selector(text(value, what))
    except SelectorProblem as e:
        raise UsageError(f"{what}: {e}") from None


def path(value: Any, what: str) -> str:
    """A non-empty path (str or os.PathLike), as a string."""
    if not isinstance(value, (str, os.PathLike)):
        raise UsageError(f"{what}: expected a path, not {type(value).__name__} {value!r}")
    out = os.fspath(value)
    if not isinstance(out, str) or not out:
        raise UsageError(f"{what}: the path must not be empty")
    if "\0" in out:
        raise UsageError(f"{what}: {out!r} holds a NUL character")
    return out


def callback(value: Any, what: str) -> Any:
    if value is not None and not callable(value):
        raise UsageError(f"{what}: expected a function, not {type(value).__name__}")
    return value


def target(kubeconfig: Any = None, context: Any = None, namespace: Any = None,
           request_timeout: Any = None) -> ClusterOptions:
    """The cluster target, checked as kubectl's global flags are (None = the default)."""
    if kubeconfig is not None:
        if not isinstance(kubeconfig, (str, os.PathLike)):
            raise UsageError(f"kubeconfig: expected a path, not {type(kubeconfig).__name__} "
                             f"{kubeconfig!r}")
        kubeconfig = os.fspath(kubeconfig)
        if not isinstance(kubeconfig, str) or not kubeconfig:
            raise UsageError("kubeconfig: the path must not be empty")
    if context is not None and (not isinstance(context, str) or not context):
        raise UsageError(f"context: expected a context name, not {context!r}")
    if namespace is not None:
        problem = namespace_problem(namespace)
        if problem:
            raise UsageError(f"namespace: {problem}")
    timeout = seconds(request_timeout, "request_timeout")
    return ClusterOptions(kubeconfig=kubeconfig, context=context, namespace=namespace,
                          request_timeout=timeout)


#: What `wait` calls on an observer (kdist.api.types.Observer), in the order it does.
OBSERVER_METHODS = ("start", "update", "tick", "warning", "log", "stop")


def observer(value: Any, what: str = "observer") -> Any:
    """None, or an object with every Observer method: checked here, not when the first
    event arrives (after the job was created, with nothing to report to)."""
    if value is None:
        return None
    missing = [m for m in OBSERVER_METHODS if not callable(getattr(value, m, None))]
    if missing:
        raise UsageError(f"{what}: {type(value).__name__} {_short(value)} is not an Observer: "
                         f"it lacks {', '.join(m + '()' for m in missing)} (subclass "
                         "kdist.api.Quiet, which has every method, and override some)")
    return value


def writer(value: Any, what: str) -> Any:
    """None, or a text stream (something with write and flush, as sys.stdout)."""
    if value is not None and not all(callable(getattr(value, m, None))
                                     for m in ("write", "flush")):
        raise UsageError(f"{what}: expected a text stream with write() and flush() (as "
                         f"sys.stdout), not {type(value).__name__} {_short(value)}")
    return value


def job(value: Any, what: str = "job", or_file: bool = True) -> TrainingJob:
    """A TrainingJob (kdist.load_job); `or_file`: the caller also takes a job file's path."""
    from kdist.spec.model import TrainingJob

    if not isinstance(value, TrainingJob):
        raise UsageError(f"{what}: expected a TrainingJob (kdist.load_job)"
                         f"{' or a job file' if or_file else ''}, not "
                         f"{type(value).__name__} {_short(value)}")
    return value


def code(value: Any, what: str = "code") -> Packed | None:
    """None, or a packed workdir (kdist.api.pack_code): never a path or text, which the
    renderer would otherwise fail on with a traceback."""
    if value is None:
        return None
    from kdist.rendering.workdir import Packed

    if not isinstance(value, Packed):
        hint = " (to ship a directory, give workdir= instead)" \
            if isinstance(value, (str, os.PathLike)) else ""
        raise UsageError(f"{what}: expected a packed workdir (kdist.api.pack_code), not "
                         f"{type(value).__name__} {_short(value)}{hint}")
    return value


def _short(value: Any) -> str:
    """repr(value), cut to a line's worth (an argument can be anything, of any size)."""
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."
