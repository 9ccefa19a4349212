"""What exit codes mean to kdist: which fail a job, which restart it, which names it."""

from __future__ import annotations

import pytest

from kdist.rendering import render
from kdist.runtime.failures import pick_failure
from kdist.shared import exitcodes
from kdist.spec import validate_job

from .helpers import spec_with


@pytest.mark.parametrize(
    ("code", "retryable"),
    [(1, False), (2, False), (127, False), (128, True), (137, True), (143, True),
     (exitcodes.PEER_LOST, True), (255, True)],
)
def test_code_errors_fail_and_kills_and_lost_peers_retry(code, retryable):
    assert exitcodes.is_retryable(code) is retryable
    assert (code in exitcodes.CODE_ERRORS) is not retryable


def test_peer_lost_reads_as_no_signal():
    assert exitcodes.PEER_LOST - 128 > 64  # Linux has 64 signals
    assert "peer" in exitcodes.describe(exitcodes.PEER_LOST)
    assert "SIGKILL" in exitcodes.describe(137)
    assert "code error" in exitcodes.describe(1)


def test_the_indexed_job_fails_fast_on_exactly_the_non_retryable_codes():
    (job, _) = render(validate_job(spec_with(**{"spec.distributed": {"maxRestarts": 3}})))
    fail_job = [r for r in job["spec"]["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
    codes = set(fail_job[0]["onExitCodes"]["values"])
    # FENCED comes only from a job with spares, whose Job ignores it (test_spares.py)
    assert codes == {c for c in range(1, 256) if not exitcodes.is_retryable(c)} - \
        {exitcodes.FENCED}


@pytest.mark.parametrize(
    ("failures", "named"),
    [
        # rank 1 was SIGKILLed; rank 0 lost it a moment later: rank 1 names the failure
        ({0: (exitcodes.PEER_LOST, 2.0), 1: (-9, 1.0)}, 1),
        # ... even when the lost peer was noticed first
        ({0: (exitcodes.PEER_LOST, 1.0), 1: (-9, 2.0)}, 1),
        # a code error is never masked by the kills and lost peers it causes
        ({0: (-15, 1.0), 1: (1, 3.0), 2: (exitcodes.PEER_LOST, 0.5)}, 1),
        # between equals, the earliest
        ({0: (1, 2.0), 1: (1, 1.0)}, 1),
        ({3: (exitcodes.PEER_LOST, 1.0), 2: (exitcodes.PEER_LOST, 1.0)}, 2),
    ],
)
def test_the_launcher_reports_the_most_telling_failure(failures, named):
    assert pick_failure(failures) == named


GLOO_RESET = RuntimeError(
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error "
    "[10.244.0.7]:10896: Connection reset by peer. This is typically caused by a remote "
    "worker hanging or bugs in the application."
)


def _caused_by(cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as e:
            raise ValueError("while stepping the schedule") from e
    except ValueError as wrapped:
        return wrapped


def test_lost_peers_are_told_apart_from_code_errors():
    import torch.distributed as dist

    from kdist.workloads.common import is_peer_lost

    assert is_peer_lost(GLOO_RESET)  # what gloo raised here when a peer was SIGKILLed
    assert is_peer_lost(dist.DistNetworkError("store connection lost"))
    assert is_peer_lost(dist.DistBackendError("NCCL watchdog: communicator aborted"))
    assert is_peer_lost(_caused_by(GLOO_RESET))  # wrapped by the caller
    assert not is_peer_lost(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not is_peer_lost(_caused_by(KeyError("loss")))
    assert not is_peer_lost(ValueError("Connection reset by peer"))  # not from torch
