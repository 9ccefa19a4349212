"""Answers are read in bounded pieces (issue 38): memory stays near kdist's caps.

A 0.5 MB gzip watch event that decodes to 512 MiB took over 1 GB before it was
refused; `kdist logs --tail` and `kdist status` read a 320 MB log whole when the
server ignored `tailLines`. Each case runs kdist as a child process, its address
space capped (a run that balloons fails fast), its peak memory compared with a
plain `kdist list` on this machine now (`baseline`).
"""

from __future__ import annotations

import json

import pytest

from kdist import Client
from kdist.shared.errors import ClusterError
from tests.api import objects
from tests.api.checks import error_line
from tests.api.wireapi import Flood, WireApi, bomb

FAKEAPI_CLASS = WireApi
pytestmark = pytest.mark.timeout(240)

GROWTH_MB = 100  # far below what was sent: the 16 MiB line cap plus what reading takes
ADDRESS_SPACE_MB = 3000
FLOOD = Flood(lines=80_000, width=4096)  # 320 MiB of log


def _bounded(out, baseline) -> None:
    assert not out.timed_out, f"kdist was still running; killed:\n{out.describe()}"
    assert out.max_rss_mb <= baseline.max_rss_mb + GROWTH_MB, \
        f"peak {out.max_rss_mb:.0f} MB, a plain run {baseline.max_rss_mb:.0f} MB\n" \
        + out.describe()


def test_a_gzip_bomb_in_a_watch_is_refused_within_the_line_cap(api, kdist_proc, baseline):
    api.add(objects.job("demo"))
    api.bombs["jobs"] = bomb("demo")
    out = kdist_proc("wait", "demo", "--timeout", "30", limit=baseline.seconds + 60,
                     max_memory_mb=ADDRESS_SPACE_MB)
    error_line(out, 3, "a line of more than 16 MiB", "/jobs")
    _bounded(out, baseline)


def _flooded(api) -> None:
    """Job demo, two running pods; rank 0's log is FLOOD, sent whole whatever the tail."""
    job = api.add(objects.job("demo"))[0]
    api.add(objects.pod(job, 0), objects.pod(job, 1))
    api.set_log("demo-1-abcde", objects.step_log(1))
    api.floods[("default", "demo-0-abcde")] = FLOOD


def test_logs_tail_keeps_only_the_last_lines_of_a_log_sent_whole(api, kdist_proc, baseline):
    _flooded(api)
    out = kdist_proc("logs", "demo", "--tail", "3", limit=baseline.seconds + 60,
                     max_memory_mb=ADDRESS_SPACE_MB)
    assert out.code == 0, out.describe()
    _bounded(out, baseline)
    lines = out.stdout.splitlines()
    assert lines[:3] == ["[rank 0] " + "x" * (FLOOD.width - 1)] * 3, out.describe()
    assert [line[:30] for line in lines[3:]] == \
        [f"[rank 1] {line}"[:30] for line in objects.step_log(1).splitlines()[-3:]], \
        out.describe()
    log = next(r for r in out.requests if r.path.endswith("demo-0-abcde/log"))
    assert log.query.get("tailLines") == "3", out.describe()


def test_status_reads_a_log_sent_whole_in_bounded_memory(api, kdist_proc, baseline):
    _flooded(api)
    out = kdist_proc("status", "demo", "-o", "json", limit=baseline.seconds + 60,
                     max_memory_mb=ADDRESS_SPACE_MB)
    assert out.code == 0, out.describe()
    _bounded(out, baseline)
    assert [r["rank"] for r in json.loads(out.stdout)["ranks"]] == [0, 1], out.describe()


BIG_LOG = Flood(lines=51_200, width=4096)  # 200 MiB: past the 128 MiB answer cap


def test_logs_streams_a_log_past_the_answer_cap_in_bounded_memory(api, kdist_proc, baseline):
    """As kubectl: a log of any size is printed as it comes, never held (it was refused
    past 128 MiB, pointing at --tail)."""
    job = api.add(objects.job("demo"))[0]
    api.add(objects.pod(job, 0))
    api.floods[("default", "demo-0-abcde")] = BIG_LOG
    out = kdist_proc("logs", "demo", "--rank", "0", limit=baseline.seconds + 120,
                     max_memory_mb=ADDRESS_SPACE_MB)
    assert out.code == 0 and not out.stderr, out.describe()
    _bounded(out, baseline)
    lines = out.stdout.splitlines()
    assert len(lines) == BIG_LOG.lines, (len(lines), out.describe())
    assert set(lines) == {"[rank 0] " + "x" * (BIG_LOG.width - 1)}, out.describe()


def test_logs_past_the_answer_cap_print_every_line(api, kdist, kubeconfig, monkeypatch):
    """Without --tail the whole log is printed, however far past the answer cap (shrunk
    here to 1 MiB); only a list (`Client.rank_logs`) is refused past it."""
    monkeypatch.setattr("kdist.kube.logreads.MAX_ANSWER_BYTES", 1 << 20)
    flood = Flood(lines=1024, width=4096)  # 4 MiB
    job = api.add(objects.job("demo"))[0]
    api.add(objects.pod(job, 0))
    api.floods[("default", "demo-0-abcde")] = flood
    out = kdist("logs", "demo", "--rank", "0")
    assert out.code == 0, out.describe()
    assert out.stdout.splitlines() == ["[rank 0] " + "x" * (flood.width - 1)] * flood.lines
    with pytest.raises(ClusterError, match="more than 1 MiB to hold as a list.*Client.logs"):
        Client(kubeconfig=kubeconfig).rank_logs("demo", rank=0)
