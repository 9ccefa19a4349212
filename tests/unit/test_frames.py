"""The framed lines that carry `train()`'s outcome through a log (kdist.shared.frames):
JSON values only, and a forged pickle in the log runs nothing on the caller's machine."""

from __future__ import annotations

import base64
import hashlib
import math
import os
import pickle
import random
import sys
from collections import OrderedDict
from pathlib import Path
from types import SimpleNamespace

import pytest

from kdist.api import calls
from kdist.shared import frames
from kdist.shared.errors import JobFailed


def read_back(lines: list[str]):
    got = frames.Frames()
    for line in lines:
        assert got.feed(line), line
    return frames.decode(got.result())


def test_a_value_survives_prefixes_interleaving_and_an_earlier_cut_attempt():
    value = {"weights": list(range(5000)), "blob": base64.b64encode(os.urandom(20_000)).decode()}
    lines = frames.result_lines(value)
    assert len(lines) > 3 and all(len(line) < 16 * 1024 for line in lines)
    cut = frames.result_lines("an earlier attempt")[:1]
    other = [f"step {i}" for i in range(len(lines))]
    mixed = [f"[rank 0] {line}" for line in cut + lines] + other
    random.Random(1).shuffle(mixed)
    got = frames.Frames()
    taken = [line for line in mixed if got.feed(line)]
    assert len(taken) == len(lines) + 1
    assert frames.decode(got.result()) == value


@pytest.mark.parametrize("value, back", [
    (None, None), (True, True), (0, 0), (-(10 ** 30), -(10 ** 30)), (1.5, 1.5),
    ("ünï\u2028code \udc80", "ünï\u2028code \udc80"), ([], []), ({}, {}),
    ((1, (2, "x")), [1, [2, "x"]]),  # tuples come back as lists
    ({"a": [1, {"b": None}], "": 2.0}, {"a": [1, {"b": None}], "": 2.0}),
    (OrderedDict(z=1, a=2), {"z": 1, "a": 2}),
])
def test_json_values_round_trip(value, back):
    got = read_back(frames.result_lines(value))
    assert got == back and type(got) is type(back)


def test_nan_and_the_infinities_travel_as_pythons_json_writes_them():
    got = read_back(frames.result_lines([math.nan, math.inf, -math.inf]))
    assert math.isnan(got[0]) and got[1:] == [math.inf, -math.inf]


class Tensor:
    """Stands in for torch.Tensor (named as torch names it): what the hint is about."""

    __module__ = "torch"

    def tolist(self):
        return [1.0]

    def item(self):
        return 1.0


@pytest.mark.parametrize("value, words", [
    ({"model": Tensor()}, ["result['model']: a torch.Tensor cannot travel as JSON",
                           "return .tolist() or .item()"]),
    ([1, b"raw"], ["result[1]: a bytes cannot travel as JSON", "decode it"]),
    ({"ids": {1, 2}}, ["result['ids']: a set cannot travel", "sorted"]),
    ({"by step": {3: 0.5}}, ["result['by step']: the key 3 is an int", "str keys"]),
    ({"f": print}, ["result['f']: a builtin_function_or_method", "None, bool, int"]),
    (1 + 2j, ["result: a complex cannot travel as JSON"]),
    pytest.param([10 ** 5000], ["result: Exceeds the limit", "return such an int as str"],
                 marks=pytest.mark.skipif(not hasattr(sys, "get_int_max_str_digits"),
                                          reason="no digit limit before Python 3.11")),
])
def test_a_value_json_cannot_carry_is_refused_naming_where_it_is(value, words):
    with pytest.raises(ValueError) as refused:
        frames.result_lines(value)
    message = str(refused.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_a_cycle_or_a_value_nested_too_deep_is_refused():
    loop: list = [1]
    loop.append({"again": loop})
    with pytest.raises(ValueError, match=r"result\[1\]\['again'\]: the value contains itself"):
        frames.result_lines(loop)
    deep: list = []
    for _ in range(500):
        deep = [deep]
    with pytest.raises(ValueError, match="nested more than 100 deep"):
        frames.result_lines(deep)
    shared = [1]  # the same list twice, not a cycle
    assert read_back(frames.result_lines([shared, shared])) == [[1], [1]]


def test_a_tampered_piece_gives_no_value():
    lines = frames.result_lines(list(range(3000)))
    head, _, chunk = lines[1].rpartition(" ")
    got = frames.Frames()
    for line in [lines[0], f"{head} {'A' * len(chunk)}", *lines[2:]]:
        got.feed(line)
    assert got.result() is None


def test_an_oversized_value_is_refused_by_the_sender():
    with pytest.raises(ValueError, match="bytes as JSON, at most"):
        frames.result_lines("x" * frames.MAX_RESULT_BYTES)


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


# ---- a forged frame: text in a log never runs code here -----------------------------------


class Mkdir:
    """A pickle that runs os.mkdir(path) when loaded: what a hostile log line could carry."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def pickled_frames(value: object) -> list[str]:
    """Lines in the old, pickled frame format (kdist before the JSON one), forged."""
    payload = pickle.dumps(value)
    digest = hashlib.sha256(payload).hexdigest()[:16]
    return [f"KDIST-RESULT {digest} 1/1 {base64.b64encode(payload).decode()}"]


def fn_call() -> calls.TrainCall:
    job = SimpleNamespace(metadata=SimpleNamespace(name="demo"))
    return calls.TrainCall(job=job, code=None, what="fit", returns=True)  # type: ignore[arg-type]


def test_a_forged_pickled_frame_runs_nothing_and_is_refused_by_name(tmp_path):
    target = tmp_path / "made-by-the-log"
    watcher = calls._Watcher(None)
    for line in pickled_frames(Mkdir(target)):
        watcher.log(0, line)
    with pytest.raises(JobFailed) as refused:
        calls._value(watcher, 0, fn_call())
    assert not target.exists(), "a line of the pod's log ran code on the client"
    message = str(refused.value)
    assert "pickled KDIST-RESULT lines, which kdist never loads" in message, message
    assert "image's kdist is older" in message and "job demo" in message, message


def test_a_forged_pickle_in_the_json_frame_is_not_json(tmp_path):
    """The digest only ties the pieces together: anyone can frame anything, so what the
    pieces hold is read as JSON and nothing else."""
    target = tmp_path / "made-by-the-log"
    payload = pickle.dumps(Mkdir(target))
    digest = hashlib.sha256(payload).hexdigest()[:16]
    watcher = calls._Watcher(None)
    watcher.log(0, f"{frames.RESULT} {digest} 1/1 {base64.b64encode(payload).decode()}")
    with pytest.raises(JobFailed, match="return value cannot be read: it is not JSON"):
        calls._value(watcher, 0, fn_call())
    assert not target.exists()


def test_a_json_frame_wins_over_a_stray_pickled_one():
    watcher = calls._Watcher(None)
    for line in pickled_frames("old") + frames.result_lines({"loss": 0.25}):
        watcher.log(0, line)
    assert calls._value(watcher, 0, fn_call()) == {"loss": 0.25}


def test_a_hostile_deeply_nested_json_frame_is_a_clear_error():
    payload = b"[" * (frames.MAX_RESULT_BYTES // 2) + b"]" * (frames.MAX_RESULT_BYTES // 2)
    text = base64.b64encode(payload).decode()
    digest = hashlib.sha256(payload).hexdigest()[:16]
    pieces = [text[i:i + frames.CHUNK] for i in range(0, len(text), frames.CHUNK)]
    watcher = calls._Watcher(None)
    for i, piece in enumerate(pieces):
        watcher.log(0, f"{frames.RESULT} {digest} {i + 1}/{len(pieces)} {piece}")
    with pytest.raises(JobFailed, match="nested more than 100 deep"):
        calls._value(watcher, 0, fn_call())
