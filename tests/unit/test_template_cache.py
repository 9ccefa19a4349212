"""Compiled templates kept between runs (kdist.rendering.template_cache)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kdist.rendering import template_cache
from tests.unit import golden


def _render(cache_home: Path, **env: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "kdist", "render", "examples/ddp-cpu.yaml"], check=True,
        capture_output=True, text=True, cwd=golden.ROOT,
        env={**os.environ, "XDG_CACHE_HOME": str(cache_home), **env}).stdout


def test_a_second_render_uses_the_cache_and_prints_the_same(tmp_path):
    first = _render(tmp_path)
    cached = sorted((tmp_path / "kdist" / "templates").iterdir())
    assert len(cached) == 3  # job, service and the pod template they include
    assert (tmp_path / "kdist" / "templates").stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o077 == 0 for p in cached)
    assert _render(tmp_path) == first
    assert _render(tmp_path, KDIST_TEMPLATE_CACHE="off") == first


def test_torn_cache_files_cost_a_compile_not_the_command(tmp_path):
    first = _render(tmp_path)
    for p in (tmp_path / "kdist" / "templates").iterdir():
        p.write_bytes(p.read_bytes()[:40])
    assert _render(tmp_path) == first
    for p in (tmp_path / "kdist" / "templates").iterdir():
        p.write_bytes(b"\x00not a cache")
    assert _render(tmp_path) == first


def test_an_edited_template_is_never_served_from_the_cache(tmp_path, monkeypatch):
    import jinja2

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    templates = tmp_path / "t"
    templates.mkdir()
    (templates / "a.j2").write_text("one {{ x }}")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates),
                             bytecode_cache=template_cache.bytecode_cache())
    assert env.get_template("a.j2").render(x=1) == "one 1"
    (templates / "a.j2").write_text("two {{ x }}")
    fresh = jinja2.Environment(loader=jinja2.FileSystemLoader(templates),
                               bytecode_cache=template_cache.bytecode_cache())
    assert fresh.get_template("a.j2").render(x=1) == "two 1"


@pytest.mark.parametrize("case", ["shared", "file", "off"])
def test_no_cache_where_it_could_not_be_private(tmp_path, monkeypatch, case):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    where = template_cache.directory()
    if case == "shared":  # others could plant code there
        where.mkdir(parents=True)
        where.chmod(0o777)
    elif case == "file":
        where.parent.mkdir(parents=True)
        where.write_text("not a directory")
    else:
        monkeypatch.setenv(template_cache.OFF, "off")
    assert template_cache.bytecode_cache() is None
    monkeypatch.delenv(template_cache.OFF, raising=False)
    if case == "off":
        assert template_cache.bytecode_cache() is not None
