"""`kdist status --plot` / `Client.plot`'s picture: written, in the format asked, readable,
restarts marked; a wrong suffix or a missing matplotlib is one clear UsageError."""

from __future__ import annotations

import errno
import os
import stat
import struct
import sys
import xml.etree.ElementTree as ET

import pytest

from kdist.api.drawing import check_plot, plot_steps
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


# ---- where the picture goes: a folder that exists, never through a link, whole or not at all


def test_a_missing_folder_is_refused_before_anything_is_read(tmp_path):
    with pytest.raises(UsageError, match=r"--plot: .*'.*nowhere' does not exist"):
        check_plot(tmp_path / "nowhere" / "steps.png", "--plot")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match=r"--plot: .* is not a folder"):
        check_plot(tmp_path / "file" / "steps.png", "--plot")


@pytest.mark.parametrize("check_first", [True, False], ids=["check_plot", "plot_steps"])
def test_a_link_at_the_path_is_refused_and_what_it_points_to_kept(tmp_path, check_first):
    pytest.importorskip("matplotlib")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "steps.svg"
    link.symlink_to(victim)
    with pytest.raises(UsageError, match=r"--plot: .*steps\.svg' is a symbolic link"):
        if check_first:
            check_plot(link, "--plot")
        plot_steps(series(), link, what="--plot")
    assert victim.read_text() == "precious\n" and link.is_symlink()


def test_a_folder_or_a_fifo_at_the_path_is_refused(tmp_path):
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(UsageError, match="not a regular file"):
        check_plot(tmp_path / "dir.png", "--plot")
    os.mkfifo(tmp_path / "pipe.png")
    with pytest.raises(UsageError, match="not a regular file"):
        check_plot(tmp_path / "pipe.png", "--plot")


def _savefig_that_fills_the_disk(original):
    """Figure.savefig that writes half its picture where it was told, then fails as a full
    disk does."""
    def savefig(self, fname, **kwargs):
        import io

        buf = io.BytesIO()
        original(self, buf, **kwargs)
        half = buf.getvalue()[:len(buf.getvalue()) // 2]
        if isinstance(fname, (str, os.PathLike)):
            with open(fname, "wb") as out:
                out.write(half)
        else:
            fname.write(half)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return savefig


@pytest.mark.parametrize("where", ["drawing", "writing"])
def test_a_failed_write_leaves_the_old_picture_whole_and_no_stray_file(tmp_path, monkeypatch,
                                                                       where):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    path = tmp_path / "steps.svg"
    plot_steps(series(), path)
    before = path.read_bytes()
    if where == "drawing":
        monkeypatch.setattr(Figure, "savefig", _savefig_that_fills_the_disk(Figure.savefig))
    else:
        def full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(UsageError, match="--plot: cannot"):
        plot_steps({0: series()[0][:3]}, path, what="--plot")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["steps.svg"]


def test_a_new_picture_is_readable_as_a_file_written_anew_and_leaves_no_stray_file(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "steps.png"
    plot_steps(series(), path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["steps.png"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    path.chmod(0o600)  # replacing a picture keeps its permissions
    plot_steps(series(), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
