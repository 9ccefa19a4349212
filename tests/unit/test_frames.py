"""The framed lines that carry `train()`'s outcome through a log (kdist.shared.frames)."""

from __future__ import annotations

import os
import pickle
import random

import pytest

from kdist.shared import frames


def test_a_value_survives_prefixes_interleaving_and_an_earlier_cut_attempt():
    value = {"weights": list(range(5000)), "blob": os.urandom(20_000)}
    lines = frames.result_lines(pickle.dumps(value))
    assert len(lines) > 3 and all(len(line) < 16 * 1024 for line in lines)
    cut = frames.result_lines(pickle.dumps("an earlier attempt"))[:1]
    other = [f"step {i}" for i in range(len(lines))]
    mixed = [f"[rank 0] {line}" for line in cut + lines] + other
    random.Random(1).shuffle(mixed)
    got = frames.Frames()
    taken = [line for line in mixed if got.feed(line)]
    assert len(taken) == len(lines) + 1
    assert pickle.loads(got.result()) == value


def test_a_tampered_piece_gives_no_value():
    lines = frames.result_lines(pickle.dumps(list(range(3000))))
    head, _, chunk = lines[1].rpartition(" ")
    got = frames.Frames()
    for line in [lines[0], f"{head} {'A' * len(chunk)}", *lines[2:]]:
        got.feed(line)
    assert got.result() is None


def test_an_oversized_value_is_refused_by_the_sender():
    with pytest.raises(ValueError, match="at most"):
        frames.result_lines(b"x" * (frames.MAX_RESULT_BYTES + 1))


def test_an_error_line_is_bounded_and_read_back():
    line = frames.error_line(3, "ValueError", "bad" * 10_000, ["  line"] * 1000)
    assert len(line) < frames.MAX_ERROR_CHARS * 2
    got = frames.Frames()
    assert got.feed(f"[rank 3] {line}")
    (error,) = got.errors
    assert (error["rank"], error["type"]) == (3, "ValueError")
    assert len(error["traceback"]) <= frames.TRACEBACK_LINES


def test_ordinary_lines_are_not_frames():
    got = frames.Frames()
    assert not got.feed('{"event": "step", "step": 1}')
    assert not got.feed("KDIST-RESULTS are in")
    assert got.result() is None and got.errors == []
