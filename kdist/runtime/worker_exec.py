"""What a worker gets before its command runs, and ``python -m kdist.runtime.worker_exec CMD``.

kdist's launcher applies ``prepare`` to each worker's environment and starts the
worker's own command (``worker_argv``) directly, its output into its pipe. For any
other launcher (torch's elastic agent, a shell), ``python -m kdist.runtime.worker_exec
CMD [ARG...]`` does the same and ``exec``s CMD (same pid). Either way every worker,
whatever it runs, gets what kdist promises an unchanged script (docs/byo-script.md):

- torchrun's restart variables, right after a whole-job restart:
  ``TORCHELASTIC_RESTART_COUNT`` = ``KDIST_RESTART_COUNT`` and
  ``TORCHELASTIC_MAX_RESTARTS`` = ``KDIST_MAX_RESTARTS`` (restarts are the job's,
  never a launcher's own);
- unbuffered Python output (``PYTHONUNBUFFERED``, for pythons the script
  starts itself; ``python`` commands also get ``-u``, as under torchrun);
- ``collectiveTimeoutSeconds`` as torch's default process-group timeout (the
  ``sitecustomize`` in ``kdist.runtime.sitehook``, first on ``PYTHONPATH``);
- stdout and stderr into one pipe the launcher follows (``kdist.runtime.output``).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import MutableMapping, Sequence
from pathlib import Path

from kdist.shared import env as E

SITEHOOK = str(Path(__file__).resolve().parent / "sitehook")
PYTHONS = ("python", "python3")
MODULE = "kdist.runtime.worker_exec"


def worker_argv(module: str | None, rest: Sequence[str]) -> list[str]:
    """The worker's own command line, as the launcher starts it.

    ``python`` means the interpreter running kdist (a venv locally, the image's
    python in a pod), not whatever PATH finds first; python workers run with
    ``-u`` as torchrun runs them.
    """
    if module is not None:
        return [sys.executable, "-u", "-m", module, *rest]
    if rest[0] in PYTHONS:
        return [sys.executable, "-u", *rest[1:]]
    return list(rest)


def command(module: str | None, rest: Sequence[str]) -> tuple[str, list[str]]:
    """This wrapper, then the worker's own command: for a launcher that cannot set the
    worker's environment itself (kdist's own launcher runs ``worker_argv`` directly)."""
    return sys.executable, ["-m", MODULE, *worker_argv(module, rest)]


def prepare(environ: MutableMapping[str, str]) -> str | None:
    """Set the worker's variables in ``environ``; return the pipe its output goes to."""
    environ["TORCHELASTIC_RESTART_COUNT"] = environ.get(E.RESTART_COUNT) or "0"
    environ["TORCHELASTIC_MAX_RESTARTS"] = environ.get(E.MAX_RESTARTS) or "0"
    environ.setdefault("PYTHONUNBUFFERED", "1")
    path = environ.get("PYTHONPATH")
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (SITEHOOK, path) if p)
    pipes = environ.pop(E.OUTPUT_PIPES, "")
    if not pipes:
        return None
    return os.path.join(pipes, environ.get("LOCAL_RANK", "0"))


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.exit("usage: python -m kdist.runtime.worker_exec CMD [ARG...]")
    pipe = prepare(os.environ)
    if pipe is not None:
        fd = os.open(pipe, os.O_WRONLY)
        os.dup2(fd, 1)
        os.dup2(fd, 2)  # one stream: stdout and stderr keep their order
        os.close(fd)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:  # as a shell says it: 127 not found, 126 not runnable
        print(f"kdist: cannot run {argv[0]!r}: {e.strerror}", file=sys.stderr, flush=True)
        os._exit(127 if e.errno == errno.ENOENT else 126)


if __name__ == "__main__":
    main()
