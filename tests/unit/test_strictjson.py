"""`kdist.shared.strictjson`: what `-o json` prints is JSON every parser reads, and the
fast path (no copy when no float needs it) prints what the copying one does."""

from __future__ import annotations

import json
import math

import pytest

from kdist.shared import strictjson

PLAIN = {"ranks": [{"rank": 0, "loss": 0.25, "pods": ("a", "b")}, {"rank": 1, "loss": None}],
         "name": "big", "done": False}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_floats_json_cannot_write_are_null_at_any_depth(bad):
    value = {"a": [1.5, {"b": (bad, 2)}], "c": bad}
    text = strictjson.dumps(value, indent=2)
    assert json.loads(text) == {"a": [1.5, {"b": [None, 2]}], "c": None}


def test_a_value_without_them_prints_as_its_finite_copy():
    for options in ({}, {"indent": 2}, {"sort_keys": True}):
        assert strictjson.dumps(PLAIN, **options) == \
            json.dumps(strictjson.finite(PLAIN), allow_nan=False, **options)


def test_what_json_cannot_write_at_all_is_still_an_error():
    with pytest.raises(TypeError):
        strictjson.dumps({"a": object()})
