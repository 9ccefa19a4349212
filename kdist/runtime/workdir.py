"""The container side of a shipped workdir: reassemble, verify and safely unpack it.

Runtime side (standard library and ``kdist.shared`` only): this runs inside
the training image, from the launcher, before any worker starts, and in
``kdist run --local``. The CLI side (``kdist.rendering.workdir``) packs a
directory into a gzip'd tar, splits it into ConfigMaps with one binaryData
key each, named ``part-NNNN-of-MMMM``; the pod mounts them all into one
directory (a projected volume), and ``unpack`` turns that directory back into
the tree, in a writable emptyDir.

The part-key pattern and the caps live here (the packer imports them: both
sides must agree, and this side may not import the packer); env names,
paths and annotation keys live in ``kdist.shared``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import posixpath
import re
import shutil
import tarfile
import zlib
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path

from kdist.shared import env as E
from kdist.shared.errors import LaunchError
from kdist.shared.limits import (
    CODE_MAX_FILES,
    CODE_MAX_TAR_BYTES,
    CODE_MAX_UNPACKED_BYTES,
    code_name_problem,
)

#: The one binaryData key of each ConfigMap, and the file name it becomes in the mount.
#: Index and count are in the name so the unpacker needs no other metadata to
#: notice a missing, extra or foreign part.
PART_KEY = "part-{index:04d}-of-{count:04d}"
PART_RE = re.compile(r"part-(\d{4})-of-(\d{4})")

#: Caps shared with the packer (``kdist.shared.limits``). The unpacker enforces a bound
#: on the decompressed size so a corrupt (or hostile) archive cannot fill memory.
MAX_FILES = CODE_MAX_FILES
MAX_UNPACKED_BYTES = CODE_MAX_UNPACKED_BYTES
MAX_TAR_BYTES = CODE_MAX_TAR_BYTES


class UnpackError(ValueError):
    """The shipped code cannot be used as it is; one line, the launcher exits 2."""

    exit_code = 2


def part_key(index: int, count: int) -> str:
    """The binaryData key (and mounted file name) of part `index` of `count`."""
    return PART_KEY.format(index=index, count=count)


def read_parts(sources: Iterable[Path | str]) -> bytes:
    """The archive: every ``part-NNNN-of-MMMM`` file in `sources` (dirs or files), in order.

    Refuses a set with a missing, duplicated or extra part, or parts that disagree on
    the count (two workdirs' ConfigMaps mixed up).
    """
    found: dict[int, Path] = {}
    counts: set[int] = set()
    for src in sources:
        src = Path(src)
        if src.is_dir():
            # A kubelet ConfigMap volume also holds ..data and ..<timestamp>
            # entries (its atomic-update machinery): the pattern skips them.
            files = [p for p in sorted(src.iterdir()) if PART_RE.fullmatch(p.name)]
        elif src.is_file() and PART_RE.fullmatch(src.name):
            files = [src]
        else:
            raise UnpackError(f"{src}: not a directory of code parts nor a part file")
        for f in files:
            m = PART_RE.fullmatch(f.name)
            assert m is not None
            index, count = int(m.group(1)), int(m.group(2))
            if index in found:
                raise UnpackError(f"code part {index} found twice: {found[index]} and {f}")
            found[index] = f
            counts.add(count)
    if not found:
        raise UnpackError("no code parts (part-NNNN-of-MMMM) in "
                          + ", ".join(str(s) for s in sources))
    if len(counts) != 1:
        raise UnpackError(f"code parts disagree on their count: {sorted(counts)}")
    count = counts.pop()
    missing = sorted(set(range(count)) - set(found))
    extra = sorted(set(found) - set(range(count)))
    if missing or extra:
        raise UnpackError(f"code parts incomplete: expected {count}, "
                          f"missing {missing}, unexpected {extra}")
    return b"".join(found[i].read_bytes() for i in range(count))


def gunzip_bounded(archive: bytes, limit: int = MAX_TAR_BYTES) -> bytes:
    """The decompressed tar, refusing one over `limit` bytes (never holds more)."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(archive), mode="rb") as gz:
            tar = gz.read(limit + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise UnpackError(f"shipped code is not a complete gzip archive: {e}") from None
    if len(tar) > limit:
        raise UnpackError(f"shipped code unpacks to more than {limit} bytes; refused")
    return tar


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_members(members: list[tarfile.TarInfo]) -> None:
    """Refuse, before anything is written, an archive kdist's packer cannot have made.

    Only regular files, directories and relative symlinks; no absolute names, no
    ``..``, no two names for one path (``a`` and ``./a``: extraction would let the
    later win), no set-id or sticky bits, at most MAX_FILES members.
    Link targets are checked lexically here; links through links are caught at
    extraction against the real tree (``_safe_extract``).
    """
    if len(members) > MAX_FILES:
        raise UnpackError(f"shipped code has {len(members)} entries, at most {MAX_FILES}")
    seen: dict[str, str] = {}  # the path a name extracts to -> the first name for it
    for m in members:
        name = m.name
        problem = code_name_problem(name)
        if problem is not None:
            raise UnpackError(f"shipped code has {problem} {name!r}; refused")
        path = posixpath.normpath(name)
        if path in seen:
            first = seen[path]
            said = f"{name!r} twice" if first == name else f"{first!r} and {name!r}, one path"
            raise UnpackError(f"shipped code has {said}; refused")
        seen[path] = name
        if m.mode & ~0o777:
            raise UnpackError(f"shipped code has special mode bits on {name!r}; refused")
        if m.issym():
            target = m.linkname
            resolved = os.path.normpath(os.path.join(os.path.dirname(name), target))
            if (not target or target.startswith("/") or resolved == ".."
                    or resolved.startswith("../")):
                raise UnpackError(f"shipped code has a link {name!r} -> {target!r} "
                                  "leaving the tree; refused")
        elif not (m.isreg() or m.isdir()):
            raise UnpackError(f"shipped code has {name!r}, neither a file, a directory "
                              "nor a symlink; refused")


def _safe_extract(tar: tarfile.TarFile, members: list[tarfile.TarInfo], dest: Path) -> None:
    if hasattr(tarfile, "data_filter"):
        # 3.11.4+, 3.10.12+: the stdlib's own check, against the real tree as it
        # is extracted (catches a link that escapes through an earlier link).
        try:
            tar.extractall(dest, members=members, filter="data")
        except tarfile.FilterError as e:
            raise UnpackError(f"shipped code refused while unpacking: {e}") from None
        return
    # Older Pythons: the same checks by hand, one member at a time, so each sees
    # the links extracted before it.
    root = os.path.realpath(dest)
    for m in members:
        where = os.path.realpath(os.path.join(root, m.name))
        if not _inside(where, root):
            raise UnpackError(f"shipped code path {m.name!r} leaves {dest}; refused")
        if m.issym():
            target = os.path.realpath(os.path.join(root, os.path.dirname(m.name), m.linkname))
            if not _inside(target, root):
                raise UnpackError(f"shipped code link {m.name!r} leaves {dest}; refused")
        m.uid = m.gid = 0
        m.uname = m.gname = ""
        tar.extract(m, dest, set_attrs=not m.issym(), numeric_owner=True)


def unpack(sources: Iterable[Path | str], expected_sha256: str, dest: Path | str) -> None:
    """Reassemble the parts in `sources`, check the tar's sha256, extract it into `dest`.

    `dest` must be absent or an empty, writable directory (a fresh emptyDir): two
    versions of the code never mix. Nothing is extracted unless the hash matches
    and every entry passes ``check_members``.
    """
    sources = list(sources)
    dest = Path(dest)
    tar_bytes = gunzip_bounded(read_parts(sources))
    actual = hashlib.sha256(tar_bytes).hexdigest()
    if actual != expected_sha256.strip().lower():
        raise UnpackError(f"shipped code hash mismatch: expected {expected_sha256}, got "
                          f"{actual} (ConfigMaps from another submission of this job?)")
    if dest.exists():
        if not dest.is_dir():
            raise UnpackError(f"cannot unpack the code into {dest}: not a directory")
        if any(dest.iterdir()):
            raise UnpackError(f"cannot unpack the code into {dest}: not empty")
    else:
        dest.mkdir(parents=True)
    if not os.access(dest, os.W_OK | os.X_OK):
        raise UnpackError(f"cannot unpack the code into {dest}: not writable "
                          "(mount a writable emptyDir there)")
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
            members = tar.getmembers()
            check_members(members)
            _safe_extract(tar, members, dest)
    except tarfile.TarError as e:
        raise UnpackError(f"shipped code is not a readable tar archive: {e}") from None


def unpack_from_env(env: Mapping[str, str]) -> Path | None:
    """The launcher's entry: unpack when ``KDIST_CODE_SHA256`` is set; the code dir, else None."""
    sha = env.get(E.CODE_SHA256)
    if not sha:
        return None
    dest = Path(env.get(E.CODE_DIR) or E.DEFAULT_CODE_DIR)
    # A pod restarted in place keeps its emptyDir: what this pod's earlier start unpacked
    # there (and its workers wrote) goes, so the code starts as in a new pod. Only then:
    # a directory kdist did not fill is never emptied.
    mark = Path(env[E.RESTART_DIR]) / UNPACKED if env.get(E.RESTART_DIR) else None
    if mark is not None and _read(mark) == str(dest) and dest.is_dir():
        _empty(dest)
    unpack([Path(env.get(E.CODE_SRC) or E.DEFAULT_CODE_MOUNT)], sha, dest)
    if mark is not None:
        mark.write_text(str(dest))
    return dest


#: In KDIST_RESTART_DIR: where this pod's launcher unpacked the code (restarts in place).
UNPACKED = "code-unpacked"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _empty(directory: Path) -> None:
    """Remove everything in `directory`, following no link."""
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def use_shipped_code(environ: MutableMapping[str, str]) -> Path | None:
    """The launcher's step before any worker: with ``KDIST_CODE_SHA256`` set (spec.workdir),
    unpack the code and make it the workers' directory; returns it (None: no code).

    The parts (``KDIST_CODE_SRC``, the pod's read-only ConfigMap mount) are checked
    against the hash and unpacked into ``KDIST_CODE_DIR`` (the pod's emptyDir,
    /workspace), which becomes the current directory (the workers inherit it) and the
    first ``PYTHONPATH`` entry. LaunchError (exit 2: the job fails, no retry) when the
    code cannot be used: a retry would meet the same ConfigMaps.
    """
    try:
        dest = unpack_from_env(environ)
    except UnpackError as e:
        raise LaunchError(str(e)) from None
    except OSError as e:  # a full or read-only emptyDir, a mount that went away
        raise LaunchError(f"cannot unpack the shipped code: {e}") from None
    if dest is None:
        return None
    os.chdir(dest)
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(dest), environ.get("PYTHONPATH"))
                                            if p)
    return dest
