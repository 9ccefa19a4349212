"""`kdist status --plot` / `Client.plot`'s picture: written, in the format asked, readable,
restarts marked; a wrong suffix or a missing matplotlib is one clear UsageError."""

from __future__ import annotations

import struct
import sys
import xml.etree.ElementTree as ET

import pytest

from kdist.api.plot import check_plot, plot_steps
from kdist.api.steps import Step
from kdist.shared.errors import UsageError


def series() -> dict[int, list[Step]]:
    out: dict[int, list[Step]] = {}
    for rank in (0, 1):
        out[rank] = [Step(rank, step, 2.0 / step, 1000.0 + rank * 10, 1e9 + step,
                          0 if step <= 40 else 1) for step in range(10, 101, 10)]
    return out


def test_a_png_is_written_and_reads_back(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "steps.png"
    assert plot_steps(series(), path, title="job demo") == 20
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert (width, height) == (900, 600)  # 9 x 6 inches at 100 dpi
    from matplotlib.image import imread

    pixels = imread(path)
    assert pixels.shape[:2] == (600, 900) and pixels.std() > 0.01  # not a blank page


def test_an_svg_is_written_with_both_ranks_and_the_restart(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "steps.SVG"
    plot_steps(series(), path)
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    text = path.read_text()
    for label in ("rank 0", "rank 1", "restart 1", "loss", "samples/s"):
        assert label in text, label


def test_no_steps_still_draws_a_picture_that_says_so(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "empty.svg"
    assert plot_steps({}, path) == 0
    assert "no step lines yet" in path.read_text()


@pytest.mark.parametrize("name", ["steps.pdf", "steps", "steps.png.txt"])
def test_only_png_and_svg(tmp_path, name):
    with pytest.raises(UsageError, match=r"--plot: .* must end in \.png or \.svg"):
        check_plot(tmp_path / name, "--plot")


def test_without_matplotlib_the_message_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(UsageError, match=r"needs matplotlib.*pip install 'kdist\[plot\]'"):
        check_plot(tmp_path / "x.png")
