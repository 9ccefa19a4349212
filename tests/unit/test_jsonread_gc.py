"""`kdist.shared.jsonread` reads a big answer (a page of 250 pods, ~1.4 MB) with the cyclic
garbage collector paused: json.loads builds a tree, with no cycle to find, yet without the
pause every 700 containers it made started a collection that walked them (~5% of a
1,000-pod `kdist status`'s CPU, issue 53). Counted here by the collector's own callbacks,
not timed."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator

import pytest

from kdist.shared import jsonread

# Many small objects, as a pod list is: what makes the collector run.
BIG = json.dumps({"items": [{"metadata": {"name": f"p{i}", "labels": {"a": "b"}},
                             "status": {"conditions": [{"type": "Ready"}]}}
                            for i in range(20_000)]})


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection started while the test runs."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    was = gc.isenabled()
    gc.enable()
    gc.callbacks.append(callback)
    try:
        yield seen
    finally:
        gc.callbacks.remove(callback)
        if not was:
            gc.disable()


def test_a_big_answer_is_read_without_a_collection(collections):
    assert len(BIG) >= jsonread.BIG
    value = jsonread.loads(BIG, limit=len(BIG))
    during = list(collections)
    assert len(value["items"]) == 20_000
    # At most the one that the first allocation after the pause starts (its count ran on).
    assert len(during) <= 1, during
    assert gc.isenabled()


def test_the_same_text_read_by_json_alone_starts_collections(collections):
    """The control: what the pause saves is real here (else the test above proves nothing)."""
    assert json.loads(BIG)["items"]
    assert len(collections) >= 20, collections  # ~80,000 containers: ~100 collections


def test_a_collector_turned_off_before_stays_off():
    was = gc.isenabled()
    gc.disable()
    try:
        jsonread.loads(BIG, limit=len(BIG))
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


def test_the_collector_runs_again_after_a_text_that_is_not_read():
    with pytest.raises(jsonread.NotRead):
        jsonread.loads(BIG[:-1], limit=len(BIG))
    with pytest.raises(jsonread.OutOfBounds):
        jsonread.loads("[" * 200 + "]" * 200 + " " * jsonread.BIG, limit=10 ** 6)
    assert gc.isenabled()
