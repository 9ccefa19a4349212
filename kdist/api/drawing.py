"""A picture of a job's steps: loss and throughput per rank over steps, restarts marked.

`kdist status NAME --plot FILE` and `Client.plot`. matplotlib is an optional
extra (``pip install 'kdist[plot]'``); without it the one-line UsageError says
so. A missing folder or a link at FILE is refused before anything is read; the
picture replaces FILE whole (a temporary file renamed), or leaves it as it was.
Only matplotlib's object API is used (no pyplot): drawing a file from a
notebook leaves its plotting backend as it was.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdist.shared.errors import UsageError

if TYPE_CHECKING:
    from kdist.api.steps import Step

FORMATS = {".png": "png", ".svg": "svg"}


def plot_format(path: str | os.PathLike[str], what: str = "plot") -> str:
    """The image format `path` asks for by its suffix (UsageError for any other)."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise UsageError(f"{what}: {os.fspath(path)!r} must end in .png or .svg")
    return FORMATS[suffix]


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError("plotting needs matplotlib, which is not installed here: "
                         "pip install 'kdist[plot]' (or any matplotlib >= 3.5)") from None
    return Figure


def check_plot(path: str | os.PathLike[str], what: str = "plot") -> None:
    """Everything drawing into `path` needs, checked before the steps are read: its
    format, matplotlib, a folder to write in, and no link or non-file in the way."""
    plot_format(path, what)
    _figure_class()
    _check_target(os.fspath(path), what)


def _check_target(path: str, what: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        why = "is not a folder" if os.path.lexists(folder) else "does not exist"
        raise UsageError(f"{what}: cannot write {path!r}: {folder!r} {why}")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise UsageError(f"{what}: cannot use {path!r}: {e.strerror or e}") from None
    if stat.S_ISLNK(mode):
        # Writing through it would put the picture wherever the link points (another
        # user's file, a dotfile): kdist never follows a link it was not asked to make.
        raise UsageError(f"{what}: {path!r} is a symbolic link; give the path of a file "
                         "(kdist does not write through links)")
    if not stat.S_ISREG(mode):
        raise UsageError(f"{what}: {path!r} exists and is not a regular file")


def plot_steps(series: dict[int, list[Step]], path: str | os.PathLike[str], *,
               title: str = "", what: str = "plot") -> int:
    """Draw `series` (`Client.metrics`) into `path` (.png or .svg); the points drawn.

    Top: the loss of each rank over steps; bottom: samples/s. A dashed line
    marks each restart, at the first step of the attempt that followed it.
    """
    fmt = plot_format(path, what)
    figure_class = _figure_class()
    fig = figure_class(figsize=(9, 6), layout="constrained")
    loss_ax, pace_ax = fig.subplots(2, 1, sharex=True)
    drawn = 0
    restarts: dict[int, int] = {}  # attempt -> its first step (over every rank)
    for rank, steps in sorted(series.items()):
        drawn += len(steps)
        for s in steps:
            if s.restart and (s.restart not in restarts or s.step < restarts[s.restart]):
                restarts[s.restart] = s.step
        with_loss = [s for s in steps if s.loss is not None]
        if with_loss:
            loss_ax.plot([s.step for s in with_loss], [s.loss for s in with_loss],
                         label=f"rank {rank}", linewidth=1.2)
        with_pace = [s for s in steps if s.samples_per_s is not None]
        if with_pace:
            pace_ax.plot([s.step for s in with_pace], [s.samples_per_s for s in with_pace],
                         label=f"rank {rank}", linewidth=1.2)
    for attempt, step in sorted(restarts.items()):
        for ax in (loss_ax, pace_ax):
            ax.axvline(step, color="grey", linestyle="--", linewidth=1)
        loss_ax.annotate(f"restart {attempt}", (step, 1.0), xycoords=("data", "axes fraction"),
                         xytext=(3, -12), textcoords="offset points", fontsize=8, color="grey")
    loss_ax.set_ylabel("loss")
    pace_ax.set_ylabel("samples/s")
    pace_ax.set_xlabel("step")
    for ax in (loss_ax, pace_ax):
        ax.grid(True, alpha=0.3)
        if ax.get_lines():
            ax.legend(loc="best", fontsize=8)
    if not drawn:
        loss_ax.text(0.5, 0.5, "no step lines yet", ha="center", va="center",
                     transform=loss_ax.transAxes)
    fig.suptitle(title or "steps")
    picture = io.BytesIO()  # drawn whole in memory first: a failed draw writes nothing
    try:
        fig.savefig(picture, format=fmt)
    except OSError as e:  # a font or a cache matplotlib could not read
        raise UsageError(f"{what}: cannot draw {os.fspath(path)!r}: {e.strerror or e}") \
            from None
    _write_atomically(os.fspath(path), picture.getvalue(), what)
    return drawn


def _write_atomically(path: str, data: bytes, what: str) -> None:
    """`data` in place at `path` whole or not at all: a temporary file in the same folder,
    then renamed over `path` (a rename replaces a link there; it never writes through)."""
    _check_target(path, what)  # again: the steps were read meanwhile
    folder, name = os.path.split(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise UsageError(f"{what}: cannot write in {folder!r}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
            # mkstemp makes it 0600; a picture is as readable as any file written anew.
            os.fchmod(out.fileno(), _mode_of(path))
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise UsageError(f"{what}: cannot write {path!r}: {e.strerror or e}") from None


def _mode_of(path: str) -> int:
    """The permissions a file at `path` keeps (those of the one replaced), else 0644."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return 0o644
    return mode & 0o777 if stat.S_ISREG(mode) else 0o644
