"""`held`: signals wait for the end of a block (a create and its rollback), then count."""

from __future__ import annotations

import os
import signal

import pytest

from kdist.shared.signals import Interrupted, held, interruptible


def test_signals_are_held_to_the_end_of_the_block_then_raised():
    done = []
    with interruptible(), pytest.raises(Interrupted) as e:
        with held() as pending:
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)  # a second one: still held
            done.append(pending.signum)
    assert done == [signal.SIGTERM] and e.value.signum == signal.SIGTERM


def test_the_handlers_before_the_block_are_back_after_it():
    with interruptible():
        before = signal.getsignal(signal.SIGINT)
        with held():
            pass
        assert signal.getsignal(signal.SIGINT) is before


def test_an_error_in_the_block_wins_over_a_held_signal():
    with interruptible(), pytest.raises(ValueError):
        with held():
            os.kill(os.getpid(), signal.SIGINT)
            raise ValueError("the create failed")


def test_a_signal_the_parent_ignored_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with held() as pending:
            os.kill(os.getpid(), signal.SIGINT)
        assert pending.signum is None
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigterm_once_ignores_a_repeated_sigterm_but_not_a_ctrl_c():
    seen = []
    with interruptible(sigterm_once=True):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Interrupted as e:
            seen.append(e.signum)
            os.kill(os.getpid(), signal.SIGTERM)  # GNU timeout's second: ignored
            with pytest.raises(Interrupted) as again:
                os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C still stops
            seen.append(again.value.signum)
    assert seen == [signal.SIGTERM, signal.SIGINT]
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # restored after the block
