"""What a training process's exit code means, shared by the manifests, the
launcher, the workloads and the local runner (no torch, no cluster).

Restarts belong to the job, not to a pod: a failed worker ends its launcher,
its pod fails, every peer's next collective fails, and the whole gang is made
anew (by the Job controller, the training operator or ``kdist run --local``),
resuming from the newest checkpoint. Which failures earn such a restart is
read from the exit code, the one thing all three can see:

- 1-127: the training code failed (a Python exception, ``sys.exit(N)``).
  Retrying would fail the same way, so the job fails at once.
- 128+N: killed by signal N (SIGKILL from the OOM killer, SIGTERM from a
  deleted or evicted pod): the infrastructure's doing, retried.
- ``PEER_LOST``: this process was fine, but a peer vanished under it (a
  collective or the store failed on the network). Retried with the gang;
  in the code-error range it would fail the job for another pod's fault.
- ``HUNG``: no rank made progress for ``progressTimeoutSeconds``
  (``KDIST_PROGRESS_TIMEOUT``): the launcher stopped its workers. Retried:
  a hang is most often a peer or the network, rarely the code.
"""

from __future__ import annotations

import signal

#: A peer of this process was lost: retry the whole gang. Above every 128+signal
#: code Linux can produce (signals end at 64), so it reads as nothing else.
PEER_LOST = 203

#: The job made no progress for progressTimeoutSeconds: the launcher stopped its workers.
HUNG = 204

#: A pod that restarts in place (distributed.restartMode) failed retryably with every
#: restart of ``maxRestarts`` used: its launcher exits this instead, which no restart
#: rule matches and the Job's podFailurePolicy fails the job on. The launcher's last
#: line names the failure it stands for.
RESTARTS_SPENT = 205

#: A node's launcher that comes back after the gang found its node lost and a spare took
#: its rank (a newer generation, kdist.runtime.membership): it exits at once, having
#: touched neither the job's state nor its checkpoints. Not a failure: the Job's
#: podFailurePolicy ignores it, and a local run does not count it.
FENCED = 206

#: The exit codes that fail a job at once, without a retry.
CODE_ERRORS = range(1, 128)


def in_place_codes() -> list[int]:
    """The exit codes a container restarts in place on: every retryable one
    (killed by signal 1-64, lost peer, hung)."""
    return [128 + n for n in range(1, 65)] + [PEER_LOST, HUNG]


def of_returncode(returncode: int) -> int:
    """A failed process's exit code as a shell sees it: 128+N when signal N killed it.

    ``returncode`` as Python's subprocess and torch give it (negative: the
    signal). A failure never reads as success: 0 becomes 1.
    """
    if returncode < 0:
        return 128 - returncode
    return returncode or 1


def is_retryable(code: int) -> bool:
    """Whether a pod or process group that exited with ``code`` is worth a gang restart."""
    return code >= 128 and code not in (RESTARTS_SPENT, FENCED)


def severity(code: int) -> int:
    """Which of several failures names a job's: lower first.

    A code error (0) before a kill (1) before a lost peer (2): a lost peer is
    the echo of a failure elsewhere, and a code error must not be masked by
    the retryable exits it causes in its peers.
    """
    if code == PEER_LOST:
        return 2
    if code == FENCED:  # a node already replaced: no failure of the job's
        return 3
    # RESTARTS_SPENT stands for a retryable failure (a kill, a peer lost, a hang): the
    # pod whose own failure it was ends first, and its launcher's line names it.
    return 1 if is_retryable(code) or code == RESTARTS_SPENT else 0


def describe(code: int) -> str:
    """A few words on what ``code`` means, for messages."""
    if code == 0:
        return "succeeded"
    if code == PEER_LOST:
        return "lost a peer (retryable)"
    if code == HUNG:
        return "hung: no progress within progressTimeoutSeconds (retryable)"
    if code == RESTARTS_SPENT:
        return "failed retryably with every restart of maxRestarts used (not retried)"
    if code == FENCED:
        return "fenced: a spare holds this node's rank (not a failure)"
    if code > 128 and code - 128 <= 64:
        try:
            return f"killed by {signal.Signals(code - 128).name} (retryable)"
        except ValueError:
            return f"killed by signal {code - 128} (retryable)"
    if code in CODE_ERRORS:
        return "a code error (not retried)"
    return "retryable" if is_retryable(code) else "failed"
