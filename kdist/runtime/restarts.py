"""Which whole-job restart this is: ``KDIST_RESTART_COUNT`` and torchrun's
``TORCHELASTIC_RESTART_COUNT`` for the workers, on every backend.

kdist restarts the whole gang (new pods, new launchers), so torch's agent,
which only counts restarts it makes itself, always says 0. The count comes
from whoever made the new gang (docs/byo-script.md):

- ``kdist run --local``: the runner knows the attempt and says so
  (``KDIST_RESTART_COUNT``).
- Indexed Job: the Job controller annotates each replacement pod with the
  failures of its index (``batch.kubernetes.io/job-index-failure-count``, and
  ``-ignored-failure-count`` for the evicted ones kdist's podFailurePolicy
  does not count); the pod reads both through the downward API
  (``kdist.runtime.plan``). A pod that failed twice before the others were
  replaced once would count differently from them: not in a gang restart,
  where every index fails once.
- In place (``distributed.restartMode``, ``KDIST_RESTART_DIR`` set): the kubelet
  restarts the pod's containers where they are, unseen by the Job controller. Each
  launcher counts its starts in that directory (an emptyDir, which an in-place restart
  keeps): the restarts of this pod in place, added to its index's failures (pods the
  Job controller replaced). In a gang restart every pod restarts once, so each counts
  the same; a replaced pod starts at its index's failures, which its survivors match.
- PyTorchJob: the training operator recreates pods under the same names and
  keeps no count a pod can see. The launcher keeps one per node in the
  checkpoint directory (``.kdist-restart-count-node-N``): left there when it
  exits retryably, taken (read and removed) by the next launcher of that
  node. Needs a checkpoint volume that outlives pods (a PVC; with an emptyDir
  or none the count stays 0); a job deleted mid-restart leaves its count to a
  resubmitted job of the same name and checkpoint directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kdist.runtime.plan import LaunchPlan
from kdist.shared import env as E
from kdist.shared import exitcodes

COUNTER = ".kdist-restart-count-node-{node}"


def counter_path(plan: LaunchPlan) -> Path | None:
    """Where this node's launcher keeps the count; None when the environment states it,
    or when there is no checkpoint directory to keep it in."""
    if plan.restart_count is not None or not plan.checkpoint_dir:
        return None
    return Path(plan.checkpoint_dir) / COUNTER.format(node=plan.node_rank)


def take(path: Path) -> int:
    """The count a previous launcher of this node left (0 when none), removed."""
    try:
        text = path.read_text()
        path.unlink()
    except OSError:
        return 0
    return int(text) if text.strip().isdigit() else 0


def leave(path: Path, count: int) -> None:
    """Leave `count` for the next launcher of this node (best effort, atomic)."""
    part = path.with_name(path.name + ".part")
    try:
        part.write_text(str(count))
        os.replace(part, path)
    except OSError:
        pass  # a read-only or vanished directory: the next attempt counts 0


STARTS = "starts"


def in_place_dir(environ: Mapping[str, str]) -> Path | None:
    """The directory this pod's launchers count their starts in; None unless the pod
    restarts in place."""
    value = environ.get(E.RESTART_DIR, "").strip()
    return Path(value) if value else None


def count_start(directory: Path) -> int:
    """How many launchers started in this pod before this one (its restarts in place),
    this start counted for the next. A missing or unreadable count is 0: the worst a
    lost count does is allow a restart more."""
    path = directory / STARTS
    try:
        text = path.read_text()
    except OSError:
        text = ""
    before = int(text) if text.strip().isdigit() else 0
    leave(path, before + 1)
    return before


def spent(plan: LaunchPlan, code: int, signalled: bool) -> bool:
    """Whether this in-place pod's retryable `code` must end the job instead: every
    restart of maxRestarts is used. A launcher stopped by a signal is not asked (its pod
    is being deleted: the Job controller decides, as when recreating)."""
    return (exitcodes.is_retryable(code) and not signalled
            and (plan.restart_count or 0) >= plan.max_restarts)


def restart_workers(plan: LaunchPlan, code: int, signalled: bool, directory: Path | None,
                    environ: Mapping[str, str]) -> bool:
    """Whether this launcher restarts its workers itself after ``code`` (a restart in
    process): its pod restarts in place (``directory``, where the count is kept), the
    failure is worth a gang restart, no signal is stopping the pod, a restart is left,
    and ``KDIST_RESTART_WORKERS`` is not ``0``. Every other node's workers fail too
    (a lost peer, or the watchdog) and meet this one's in the next rendezvous."""
    return (directory is not None and environ.get(E.RESTART_WORKERS, "").strip() != "0"
            and exitcodes.is_retryable(code) and not signalled
            and (plan.restart_count or 0) < plan.max_restarts)


def note_restart(directory: Path, count: int, base: int) -> None:
    """The gang is on restart ``count``, made in process: a later start of this pod's
    launcher (its container restarted in place) counts on from it. ``base``: the
    restarts the environment stated (its index's failures), which ``count_start``'s
    count is added to."""
    leave(directory / STARTS, count - base + 1)

