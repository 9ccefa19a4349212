"""kdist.runtime.output: the workers' pipes become whole, prefixed lines; redraws collapse."""

from __future__ import annotations

import io
import os
import threading

import pytest

from kdist.runtime import output as O
from kdist.runtime.output import Output, last_redraw


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines(io.StringIO):
    """What the launcher printed; `wait_for` blocks until a line arrives (no sleeps)."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = threading.Condition()

    def write(self, text: str) -> int:
        with self.changed:
            n = super().write(text)
            self.changed.notify_all()
            return n

    def lines(self) -> list[str]:
        return self.getvalue().splitlines()

    def wait_for(self, count: int) -> list[str]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.lines()) >= count, timeout=10), \
                self.lines()
        return self.lines()


@pytest.fixture
def follow(tmp_path):
    made = []

    def make(ranks=(4, 5), **kwargs):
        out = Lines()
        o = Output(tmp_path / "pipes", list(ranks), out=out, **kwargs).start()
        writers = [os.open(o.pipe(i), os.O_WRONLY) for i in range(len(ranks))]
        made.append((o, writers))
        return o, out, writers

    yield make
    for o, writers in made:
        for fd in writers:
            os.close(fd)
        o.stop()


def test_whole_lines_of_each_rank_with_its_prefix(follow):
    o, out, (w4, w5) = follow(prefix=True)
    os.write(w4, b"half a ")
    os.write(w5, b"rank five\n")
    assert out.wait_for(1) == ["[rank 5] rank five"]  # the partial line is held back
    os.write(w4, b"line\nnext\n")
    assert out.wait_for(3)[1:] == ["[rank 4] half a line", "[rank 4] next"]


def test_pods_get_the_lines_as_written(follow):
    o, out, (w4, _) = follow(prefix=False)
    os.write(w4, b'{"event": "step", "step": 1}\n')
    assert out.wait_for(1) == ['{"event": "step", "step": 1}']


def test_a_progress_bar_is_one_line_when_it_ends(follow):
    o, out, (w4, w5) = follow(prefix=True)
    for chunk in [f"\rbar {i:>2}/40".encode() for i in range(41)]:
        os.write(w4, chunk)
    os.write(w4, b"\n")
    os.write(w5, b"marker\n")
    lines = out.wait_for(2)
    bars = [line for line in lines if line.startswith("[rank 4]")]
    # the first state may be shown while it redraws (at most once per REDRAW_EVERY_S)
    assert bars[-1] == "[rank 4] bar 40/40" and len(bars) <= 2
    assert all("\r" not in line for line in lines)


def test_a_long_running_bar_shows_its_latest_state_now_and_then(follow):
    clock = FakeClock()
    o, out, (w4, _) = follow(prefix=True, clock=clock)
    os.write(w4, b"\rbar 1/9")
    assert out.wait_for(1) == ["[rank 4] bar 1/9"]
    os.write(w4, b"\rbar 2/9\rbar 3/9")
    clock.now += O.REDRAW_EVERY_S  # the next redraw is due
    assert out.wait_for(2)[-1] == "[rank 4] bar 3/9"
    os.write(w4, b"\rbar 9/9\n")
    assert out.wait_for(3)[-1] == "[rank 4] bar 9/9"


def test_tail_and_progress(follow):
    o, out, (w4, w5) = follow(prefix=True, is_progress=lambda line: line.startswith("{"))
    os.write(w4, b"warming up\n")
    os.write(w5, b'{"event": "step"}\n')
    out.wait_for(2)
    assert o.progress() == 1  # only the JSON line counts for kdist's workloads
    assert o.tail(0) == "warming up\n"
    assert o.silent_for(0) is not None and o.silent_for(1) is not None


def test_anything_counts_as_progress_for_a_users_script(follow):
    o, out, (w4, _) = follow(prefix=True)
    os.write(w4, b"\rbar 1/9")
    out.wait_for(1)
    assert o.progress() == 1


def test_what_is_left_is_printed_at_the_end(tmp_path):
    out = Lines()
    o = Output(tmp_path / "pipes", [0], prefix=True, out=out).start()
    fd = os.open(o.pipe(0), os.O_WRONLY)
    os.write(fd, b"no newline at the end")
    os.close(fd)
    o.stop()
    assert out.lines() == ["[rank 0] no newline at the end"]
    assert not (tmp_path / "pipes").exists()


@pytest.mark.parametrize(("line", "shown"), [
    ("plain", "plain"),
    ("\r 10%\r 50%\r100%", "100%"),
    ("100%\r", "100%"),  # a CRLF line end
    ("\r100%\r      \r", "100%"),  # a bar that clears itself (tqdm leave=False)
    ("", ""),
])
def test_last_redraw(line, shown):
    assert last_redraw(line) == shown


class BinaryLines:
    """A text stream with a binary side, as stdout is: what reached it, as bytes."""

    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        self.changed = threading.Condition()
        raw = self.buffer

        class _Sink(io.RawIOBase):
            def writable(self_inner) -> bool:
                return True

            def write(self_inner, data) -> int:
                with self.changed:
                    raw.write(data)
                    self.changed.notify_all()
                return len(data)

        self.buffer = _Sink()
        self.raw = raw

    def write(self, text: str) -> int:
        return self.buffer.write(text.encode())

    def flush(self) -> None:
        pass

    def wait_for(self, count: int) -> list[bytes]:
        with self.changed:
            assert self.changed.wait_for(
                lambda: self.raw.getvalue().count(b"\n") >= count, timeout=10), self.raw.getvalue()
        return self.raw.getvalue().split(b"\n")[:count]


def _binary_output(tmp_path, ranks=(0, 1)):
    out = BinaryLines()
    o = Output(tmp_path / "pipes", list(ranks), prefix=True, out=out).start()
    return o, out, [os.open(o.pipe(i), os.O_WRONLY) for i in range(len(ranks))]


def test_a_line_longer_than_max_line_is_printed_whole_and_other_ranks_wait(tmp_path):
    o, out, (w0, w1) = _binary_output(tmp_path)
    long = b"x" * (O.MAX_LINE * 3 + 17)
    done = threading.Event()

    def write_long():
        os.write(w0, long[:O.MAX_LINE + 5])
        os.write(w1, b"other rank\n")  # lands while rank 0's line is being passed on
        os.write(w0, long[O.MAX_LINE + 5:] + b"\nafter\n")
        done.set()

    threading.Thread(target=write_long).start()
    lines = out.wait_for(3)
    assert done.wait(10)
    assert lines[0] == b"[rank 0] " + long  # one line, one prefix
    assert sorted(lines[1:]) == [b"[rank 0] after", b"[rank 1] other rank"]
    for fd in (w0, w1):
        os.close(fd)
    o.stop()


def test_bytes_pass_through_as_written(tmp_path):
    o, out, (w0, w1) = _binary_output(tmp_path)
    os.write(w0, b"bad \xff\xfe utf-8\n")
    os.write(w0, b"hello\rworld\n")  # one \r within a line: not a progress bar
    os.write(w0, b"windows line\r\n")
    lines = out.wait_for(3)
    assert lines == [b"[rank 0] bad \xff\xfe utf-8", b"[rank 0] hello\rworld",
                     b"[rank 0] windows line"]
    for fd in (w0, w1):
        os.close(fd)
    o.stop()


def test_a_huge_redraw_keeps_only_its_latest_state_in_memory(tmp_path):
    o, out, (w0, w1) = _binary_output(tmp_path)
    for i in range(3000):  # ~100 KiB of redraws without a line end
        os.write(w0, b"\r%8d of 3000 " % i + b"=" * 20)
    os.write(w0, b"\n")
    for fd in (w0, w1):
        os.close(fd)
    o.stop()
    lines = out.raw.getvalue().splitlines()
    assert lines[-1] == b"[rank 0]     2999 of 3000 " + b"=" * 20
    assert len(lines) <= 2 and all(len(line) < 200 for line in lines)  # a redraw shown, the end
