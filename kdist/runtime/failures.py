"""Which worker's failure names a node's, and a lost peer told from a code error.

Torch-free, so the launcher can read any script's output and the workloads
their own exceptions the same way. A peer that vanishes (SIGKILL, OOM, a
deleted pod) makes every other rank's next collective or store call fail;
that failure is this rank's echo of another's fault, so it must restart the
gang (``exitcodes.PEER_LOST``), not fail the job as a code error would.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Mapping

from kdist.shared import exitcodes
from kdist.shared.tracebacks import user_frame

# What a collective or the store says when the other end is gone: gloo's
# transport errors carry their source path ("gloo/transport/tcp/pair.cc: ...
# Connection reset by peer", "... Timed out waiting 15000ms for recv"); torch's
# own are DistError subclasses, whatever their text.
PEER_LOST_HINTS = (
    "gloo/transport/", "Connection reset by peer", "Connection closed by peer",
    "Broken pipe", "NCCL communicator was aborted", "ncclRemoteError",
    # gloo's pair to a frozen or cut-off peer, closed at the collective timeout
    "Application timeout caused pair closure",
)
DIST_ERRORS = frozenset({"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"})
# The hints count only in these exceptions (and their subclasses, for live exceptions):
# a ValueError that quotes "Connection reset by peer" is the script's own.
_HINTED = frozenset({"RuntimeError", "ConnectionError", "ConnectionResetError",
                     "ConnectionAbortedError", "ConnectionRefusedError", "BrokenPipeError"})


def says_peer_lost(type_names: Iterable[str], message: str) -> bool:
    """Whether an exception of these class names (its own, or its MRO) and this message is a
    collective or store failing because a peer is gone."""
    names = {name.rsplit(".", 1)[-1] for name in type_names}
    if names & DIST_ERRORS:
        return True
    return bool(names & _HINTED) and any(hint in message for hint in PEER_LOST_HINTS)


def is_peer_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a collective or store failing on a lost peer."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if says_peer_lost((c.__name__ for c in type(e).__mro__), str(e)):
            return True
        e = e.__cause__ or e.__context__
    return False


_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("The above exception was the direct cause of the following exception:",
            "During handling of the above exception, another exception occurred:")
_EXCEPTION_LINE = re.compile(r"([A-Za-z_][\w.]*)(?::\s?(.*))?")
# torch.distributed's excepthook prefixes each line of an uncaught error with its rank.
_TORCH_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?")


def last_exceptions(text: str) -> list[tuple[str, str]]:
    """The (type, message) lines of the last chain of Python tracebacks in ``text``, causes
    first: what ended the process and what led to it. Empty when it shows none."""
    chain: list[tuple[str, str]] = []
    lines = [_TORCH_RANK_PREFIX.sub("", line, count=1) for line in text.splitlines()]
    i, linked = 0, False
    while i < len(lines):
        if lines[i].rstrip() != _TRACEBACK:
            if lines[i].strip() in _CHAINED:
                linked = True
            elif lines[i].strip():
                linked = False
            i += 1
            continue
        i += 1
        while i < len(lines) and (lines[i].startswith((" ", "\t")) or not lines[i].strip()):
            i += 1  # frames, source lines, carets
        m = _EXCEPTION_LINE.fullmatch(lines[i].strip()) if i < len(lines) else None
        if m is not None:
            found = (m.group(1), m.group(2) or "")
            chain = [*chain, found] if linked else [found]
        linked = False
        i += 1
    return chain


# How torch's store client says it never reached a store (TCPStore.cpp, socket.cpp).
_CONNECT_TARGET = re.compile(
    r"(?:while trying to connect to|failed to connect to any network address of) "
    r"\(\[?([^,\]]*)\]?, (\d+)\)"
    r"|failed to connect(?:/validate)? to (?:host )?\[?([^\]\s]*?)\]?:(\d+)\b")


def connect_target(message: str) -> tuple[str, int] | None:
    """The (host, port) a store client failed to connect to, when that is what ``message`` says."""
    m = _CONNECT_TARGET.search(message)
    if m is None:
        return None
    host, port = (m.group(1), m.group(2)) if m.group(2) else (m.group(3), m.group(4))
    return host, int(port)


def output_says_peer_lost(tail: str, master_port: int | None = None) -> bool:
    """Whether a worker's last output shows it died of a lost peer (any script).

    ``master_port``: the job's. A store the worker could not reach on another port
    is one the script set up itself (``mp.spawn`` with a port of its own): that
    group never formed, so no peer was lost, and a restart would fail the same way.
    """
    found = last_exceptions(tail)
    if master_port is not None and found:
        target = connect_target(found[-1][1])
        if target is not None and target[1] != master_port:
            return False
    return any(says_peer_lost([kind], message) for kind, message in found)


def pick_failure(failures: Mapping[int, tuple[int, float]]) -> int:
    """The global rank whose failure the launcher reports, from {rank: (exitcode, time)}.

    ``exitcode`` as torch gives it (negative: killed by that signal). The most
    telling failure wins (``exitcodes.severity``); then one the agent did not
    SIGTERM itself (once a worker fails, the agent stops the rest with SIGTERM,
    usually within the same whole second of torch's timestamps); then the
    earliest; then the lowest rank.
    """
    def key(rank: int) -> tuple[int, bool, float, int]:
        code, when = failures[rank]
        return (exitcodes.severity(exitcodes.of_returncode(code)), code == -signal.SIGTERM,
                when, rank)

    return min(failures, key=key)


def describe_exit(exitcode: int) -> str:
    """How a worker ended, from torch's exit code (negative: the signal)."""
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def cause(message: object, tail: str = "", base: str | None = None) -> str:
    """The worker's own error, as one short clause: from its torch error file (``@record``),
    else the last exception its output shows; "" when neither says. Then, when its
    traceback passed through the user's own code, where: ``(train.py:42)``, the file
    relative to `base` (the workers' directory)."""
    where = user_frame(tail, base)
    at = f" ({where})" if where else ""
    if isinstance(message, dict):  # the error file's {"message": ..., "extraInfo": ...}
        message = message.get("message")
    text = str(message or "").strip()
    if text and not text.startswith("To enable traceback"):  # torch's "no error file" text
        return f": {text.splitlines()[-1][:200]}{at}"
    found = last_exceptions(tail)
    if not found:
        return ""
    kind, said = found[-1]
    return (f": {kind}: {said}"[:202] if said else f": {kind}") + at
