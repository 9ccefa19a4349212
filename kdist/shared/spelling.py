"""How messages name the cluster target's options: as kubectl's flags on the command line
(`--kubeconfig`), as the keywords in Python (`kubeconfig=`), where a user would fix them.

The Python spelling is the default; the `kdist` command switches to flags while a verb
runs (`kdist.cli.main`), and back after, so a process that runs the CLI in-process and
then the API (a test, a notebook's `!kdist`) reads each in its own words.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_FLAGS = {"kubeconfig": "--kubeconfig", "context": "--context",
          "namespace": "-n/--namespace", "request_timeout": "--request-timeout"}
_as_flags = False


def option(name: str) -> str:
    """`name` ("kubeconfig", "context", "namespace", "request_timeout") as the user gives it."""
    return _FLAGS[name] if _as_flags else f"{name}="


@contextmanager
def flags() -> Iterator[None]:
    """Within: messages name the options as the command line's flags."""
    global _as_flags
    before, _as_flags = _as_flags, True
    try:
        yield
    finally:
        _as_flags = before
