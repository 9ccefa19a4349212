"""Reading answers in bounded pieces (`kdist.kube.connect.bodies`) and when to send again
(`kdist.kube.connect.throttle`): the pure parts, without a server."""

from __future__ import annotations

import gzip
import time
import zlib

import pytest

from kdist.kube.connect import bodies, throttle
from kdist.kube.connect.deadline import Watchdog, each_within
from kdist.kube.errors import HttpError
from kdist.shared.errors import ClusterError


class Answer:
    """What `bodies.pieces` reads of a urllib3 response: headers and raw pieces."""

    def __init__(self, raw: bytes, encoding: str = "", piece: int = 1000) -> None:
        self.headers = {"Content-Encoding": encoding} if encoding else {}
        self.raw, self.piece = raw, piece

    def stream(self, amt: int, decode_content: bool) -> list[bytes]:
        assert not decode_content, "bodies decodes, urllib3 must not"
        step = min(amt, self.piece)
        return [self.raw[i:i + step] for i in range(0, len(self.raw), step)]


def test_gzip_is_decoded_a_chunk_at_a_time_members_and_all():
    big = b"a" * (5 * bodies.CHUNK + 7)
    raw = gzip.compress(big) + gzip.compress(b"tail")
    pieces = list(bodies.pieces(Answer(raw, "gzip", piece=len(raw)), "x"))
    assert b"".join(pieces) == big + b"tail"
    assert max(map(len, pieces)) <= bodies.CHUNK


def test_deflate_and_identity_and_what_kdist_does_not_read():
    assert b"".join(bodies.pieces(Answer(zlib.compress(b"hi"), "deflate"), "x")) == b"hi"
    assert b"".join(bodies.pieces(Answer(b"hi", "identity"), "x")) == b"hi"
    with pytest.raises(ClusterError, match="'br', which kdist neither asked for"):
        list(bodies.pieces(Answer(b"hi", "br"), "the answer"))
    with pytest.raises(ClusterError, match="gzip that does not decode"):
        list(bodies.pieces(Answer(b"not gzip at all", "gzip"), "the answer"))


def test_a_whole_answer_past_its_cap_is_refused_or_cut():
    chunks = [b"x" * 100] * 5
    assert bodies.whole(chunks, 500, "w") == b"x" * 500
    assert bodies.whole(chunks, 250, "w", cut=True) == b"x" * 250
    with pytest.raises(ClusterError, match="w with more than 499 bytes"):
        bodies.whole(chunks, 499, "w")


def test_lines_are_split_across_pieces_and_bounded():
    chunks = [b"ab", b"c\nde", b"\n\nf"]
    assert list(bodies.lines(chunks, 3, "w")) == [b"abc", b"de", b"", b"f"]
    with pytest.raises(ClusterError, match="a line of more than 2 bytes"):
        list(bodies.lines(chunks, 2, "w"))
    assert list(bodies.lines(chunks, 2, "w", cut=True)) == [b"ab", b"de", b"", b"f"]


@pytest.mark.parametrize("text", ["a\nb\r\nc", "a\n\nb\n", "a\rb\nc\x0bd\n", "", "\n\n",
                                  "one line without an end", "é\u2028ü\n"])
@pytest.mark.parametrize("tail", [None, 0, 1, 2, 50])
def test_a_logs_last_lines_are_split_at_newlines_alone(text, tail):
    # Only "\n" ends a line (less a "\r" before it): a "\r", "\x0b" or U+2028 a worker
    # prints mid-line starts none (kdist.shared.records.launcher_said).
    raw = text.encode()
    chunks = [raw[i:i + 3] for i in range(0, len(raw), 3)]
    want = [line.removesuffix("\r") for line in text.split("\n")]
    want = want[:-1] if want[-1] == "" else want
    want = want if tail is None else want[len(want) - tail:] if tail else []
    assert bodies.last_lines(chunks, tail, 1 << 20, 1 << 20, "log") == want


def test_a_log_is_held_within_its_cap():
    chunks = [b"x" * 999 + b"\n"] * 1000
    kept = bodies.last_lines(chunks, 500, 100_000, 1 << 20, "log")
    assert 0 < len(kept) < 100 and kept[-1] == "x" * 999  # the last ones that fit
    assert bodies.last_lines([b"y" * 5000 + b"\n"], 1, 1 << 20, 100, "log") == ["y" * 100]
    with pytest.raises(ClusterError,
                       match="the log is more than 100,000 bytes to hold as a list: read its"):
        bodies.last_lines(chunks, None, 100_000, 1 << 20, "the log")


@pytest.mark.parametrize("value,seconds", [("1", 1), (" 3600 ", 3600), ("0", 0), ("-1", None),
                                           ("1.5", None), ("", None), (None, None),
                                           ("Wed, 21 Oct 2015 07:28:00 GMT", None),
                                           ("٣", None)])
def test_retry_after_is_read_as_client_go_reads_it(value, seconds):
    assert throttle.retry_after(value) == seconds


@pytest.mark.parametrize("status,method,after,tries,waited,wait", [
    (429, "GET", "1", 0, 0.0, 1.0),
    (429, "POST", "2", 0, 0.0, 2.0),  # not processed: safe to send again
    (503, "GET", "1", 0, 0.0, 1.0),
    (503, "POST", "1", 0, 0.0, None),  # may have been stored
    (504, "DELETE", "1", 0, 0.0, None),
    (429, "GET", None, 0, 0.0, None),  # no Retry-After: client-go does not retry either
    (429, "GET", "3600", 0, 0.0, None),  # a storm: end at once
    (429, "GET", "1", throttle.MAX_RETRIES, 0.0, None),
    (429, "GET", "5", 3, throttle.MAX_WAITED - 4, None),
    (409, "GET", "1", 0, 0.0, None),
])
def test_what_is_sent_again(status, method, after, tries, waited, wait):
    e = HttpError(status, "", b"", after)
    assert throttle.pause(e, method, tries, waited) == wait


def _slow(pieces: list[bytes], pause: float):
    for piece in pieces:
        time.sleep(pause)
        yield piece


def test_a_streamed_log_times_each_piece_not_the_reader():
    """`kdist logs` piped into a pager the user has paused is no dead server: only the
    time a piece takes to come counts against the deadline."""
    dog, got = Watchdog(None), []
    for piece in each_within(iter([b"a", b"b", b"c"]), dog, 0.2):
        time.sleep(0.4)  # the reader, slower than the deadline
        got.append(piece)
    assert got == [b"a", b"b", b"c"] and not dog.fired
    dog = Watchdog(None)
    assert list(each_within(_slow([b"a", b"b"], 0.4), dog, 0.2)) == [b"a", b"b"]
    assert dog.fired  # a piece that came too late: the read is cut (its socket shut)
