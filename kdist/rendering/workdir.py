"""Pack a local directory to ship with a job (``spec.workdir``), and split it into ConfigMaps.

The archive is a gzip'd POSIX (pax) tar built to be reproducible: entries in
sorted walk order, a fixed mtime, owner 0/0 with empty names, modes normalised
to 0644/0755. The same tree therefore gives the same tar, and the same hash,
on any machine and any run. The hash is taken over the *uncompressed* tar: gzip
output depends on the zlib build (zlib-ng, Apple's, Intel's differ), the tree's
identity must not.

What is left out: VCS folders, ``__pycache__``, ``*.pyc``, ``.kdist/``, and
whatever ``.gitignore`` and ``.kdistignore`` files exclude (gitignore syntax,
in the root and in any subdirectory; ``.kdistignore`` wins over ``.gitignore``
in the same directory, deeper files over shallower ones, as in git).

Nothing outside the directory is ever read: symlinks are stored as links, and
only when they resolve to something that is itself packed.

The ConfigMaps that carry the archive are made by ``kdist.rendering.code_configmaps``.
The container side (``kdist.runtime.workdir``, standard library only) holds the
part-key pattern and the caps both sides share; ``kdist.shared`` the env names,
paths and annotation keys. Packing reads the local tree, so it happens once per
command, before rendering: ``render(job, code)`` takes the result and stays pure.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

import pathspec

from kdist.shared.errors import WorkdirError
from kdist.shared.limits import CODE_MAX_FILES as MAX_FILES
from kdist.shared.limits import CODE_MAX_TAR_BYTES as MAX_TAR_BYTES
from kdist.shared.limits import CODE_MAX_UNPACKED_BYTES as MAX_UNPACKED_BYTES
from kdist.shared.limits import code_name_problem

if TYPE_CHECKING:
    from kdist.spec.model import TrainingJob

__all__ = ["DEFAULT_LIMIT", "FIELD", "Packed", "WorkdirError", "pack", "pack_workdir"]

FIELD = "spec.workdir"
#: The compressed-size cap (docs/user-guide.md: "at most 10 MiB compressed").
DEFAULT_LIMIT = 10 * 2**20
#: A fixed mtime, not 0: zip-based tools (wheel building, zipfile) refuse dates before 1980.
MTIME = 946_684_800  # 2000-01-01T00:00:00Z
#: Deflate level 6 (zlib's default). On a 4.7 MiB tree of Python sources, 9 took 4x as long
#: for 1% fewer bytes, and 1 was twice as fast but 23% bigger (more ConfigMaps to send).
GZIP_LEVEL = 6

#: Names left out wherever they appear, before any ignore file is read (cannot be re-included).
ALWAYS_EXCLUDED_NAMES = frozenset({".git", ".hg", ".svn", "__pycache__", ".kdist"})
ALWAYS_EXCLUDED_SUFFIXES = (".pyc",)
IGNORE_FILES = (".gitignore", ".kdistignore")  # later ones win in the same directory
MAX_IGNORE_FILE_BYTES = 1 << 20  # git's own are kilobytes; more is a mistake or an attack

ALTERNATIVES = ("leave files out with .kdistignore, bake the code into the image, "
                "or put it on a PVC and use spec.checkpoint/volumes")


@dataclass(frozen=True)
class Packed:
    """A packed workdir.

    `archive` is the gzip'd tar (what the ConfigMaps carry); `sha256` is the hex digest of
    the *uncompressed* tar, the tree's identity (what the unpacker verifies and status
    shows); `files` counts regular files and symlinks; `size` is their content's bytes
    before compression; `warnings` lists what was skipped and why, one line each;
    `origin` names where the directory came from (spec.workdir or --workdir), for messages;
    `root` the directory as given; `names` every packed path (files, directories, links;
    posix, relative), so validate can say a script is not there.
    """

    archive: bytes
    sha256: str
    files: int
    size: int
    warnings: tuple[str, ...] = field(default=())
    origin: str = FIELD
    root: str = ""
    names: frozenset[str] = field(default=frozenset())


@dataclass(frozen=True)
class _Entry:
    rel: str  # posix path inside the tree, no leading "./"
    kind: str  # "dir" | "file" | "link"
    size: int = 0
    executable: bool = False
    link: str = ""  # a link's target, relative to the link's directory


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class _Ignores:
    """The ignore files in force for one directory: (base, spec) pairs, shallowest first."""

    def __init__(self, specs: tuple[tuple[str, pathspec.GitIgnoreSpec], ...] = ()):
        self.specs = specs

    def enter(self, abs_dir: str, rel_dir: str) -> _Ignores:
        added = []
        for fname in IGNORE_FILES:
            path = os.path.join(abs_dir, fname)
            # An ignore file that is a link is not read (it could point anywhere, or at a
            # FIFO); the link itself is judged like any other entry.
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            try:
                with open(path, "rb") as f:
                    data = f.read(MAX_IGNORE_FILE_BYTES + 1)  # a huge (sparse) one: bounded
            except OSError as e:
                raise WorkdirError([f"{FIELD}: cannot read {path}: {e.strerror or e}"]) from None
            if len(data) > MAX_IGNORE_FILE_BYTES:
                raise WorkdirError([f"{FIELD}: {path} is over {_human(MAX_IGNORE_FILE_BYTES)}; "
                                    "an ignore file that large is not read (shorten it)"])
            lines = data.decode("utf-8", errors="replace").splitlines()
            added.append((rel_dir, pathspec.GitIgnoreSpec.from_lines(lines)))
        return _Ignores(self.specs + tuple(added)) if added else self

    def excluded(self, rel: str, is_dir: bool) -> bool:
        # git: the deepest ignore file with a matching pattern decides, and within a
        # file the last matching pattern ("!keep.py" re-includes).
        for base, spec in reversed(self.specs):
            sub = rel[len(base) + 1:] if base else rel
            result = spec.check_file(sub + "/" if is_dir else sub)
            if result.include is not None:
                return bool(result.include)
        return False


class _Walk:
    """Collects the entries to pack; records skips as warnings and refusals as problems."""

    def __init__(self, root: str):
        self.root = root
        self.entries: list[_Entry] = []
        self.links: list[tuple[_Entry, str]] = []  # link entry, resolved target (rel)
        self.warnings: list[str] = []
        self.problems: list[str] = []

    def run(self) -> None:
        self._dir("", self.root, _Ignores())
        self._keep_links_to_packed()

    def _count(self) -> None:
        if len(self.entries) > MAX_FILES:
            raise WorkdirError([
                f"{FIELD}: {self.root} has more than {MAX_FILES} files and directories after "
                f"ignore rules; {ALTERNATIVES}"])

    def _dir(self, rel_dir: str, abs_dir: str, ignores: _Ignores) -> None:
        ignores = ignores.enter(abs_dir, rel_dir)
        try:
            with os.scandir(abs_dir) as it:
                children = sorted(it, key=lambda e: e.name)
        except OSError as e:
            self.problems.append(f"{FIELD}: cannot list {abs_dir}: {e.strerror or e}")
            return
        for child in children:
            rel = f"{rel_dir}/{child.name}" if rel_dir else child.name
            if child.name in ALWAYS_EXCLUDED_NAMES or child.name.endswith(
                    ALWAYS_EXCLUDED_SUFFIXES):
                continue
            problem = code_name_problem(rel)
            if problem is not None and not ignores.excluded(rel, child.is_dir(
                    follow_symlinks=False)):
                self.problems.append(f"{FIELD}: {child.path} has {problem}, which the pods' "
                                     "unpacker refuses; rename it or leave it out with "
                                     ".kdistignore")
                continue
            try:
                st = child.stat(follow_symlinks=False)
            except OSError as e:
                self.problems.append(f"{FIELD}: cannot stat {child.path}: {e.strerror or e}")
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if ignores.excluded(rel, is_dir):
                continue
            if is_dir:
                self.entries.append(_Entry(rel, "dir"))
                self._count()
                self._dir(rel, child.path, ignores)
            elif stat.S_ISREG(st.st_mode):
                self.entries.append(_Entry(rel, "file", st.st_size,
                                           bool(st.st_mode & 0o111)))
                self._count()
            elif stat.S_ISLNK(st.st_mode):
                self._link(rel, child.path, abs_dir)
            else:
                # FIFOs, sockets, devices: never opened (a FIFO would block the read).
                self.warnings.append(f"{rel}: skipped, not a regular file, directory or symlink")

    def _link(self, rel: str, abs_path: str, abs_dir: str) -> None:
        target = os.readlink(abs_path)
        if os.path.isabs(target):
            self.warnings.append(f"{rel}: skipped, symlink to an absolute path ({target}); "
                                 "make it relative to ship it")
            return
        real = os.path.realpath(abs_path)
        if not (real == self.root or real.startswith(self.root + os.sep)):
            self.warnings.append(f"{rel}: skipped, symlink leads outside the workdir ({target})")
            return
        if not os.path.exists(real):
            self.warnings.append(f"{rel}: skipped, dangling symlink ({target})")
            return
        # Stored as a link, not as the target's content: no duplicated bytes, links to
        # directories need no recursion (so no cycles), and the tree keeps its shape.
        # The target is rewritten from the fully resolved path, so the stored link
        # never passes through another link.
        resolved = os.path.relpath(real, self.root).replace(os.sep, "/")
        entry = _Entry(rel, "link", link=os.path.relpath(real, abs_dir).replace(os.sep, "/"))
        self.links.append((entry, "" if resolved == "." else resolved))

    def _keep_links_to_packed(self) -> None:
        packed = {e.rel for e in self.entries} | {""}
        for entry, target in self.links:
            if target in packed:
                self.entries.append(entry)
                self._count()
            else:
                self.warnings.append(f"{entry.rel}: skipped, symlink to {target}, which is "
                                     "not packed (ignored or skipped)")
        self.entries.sort(key=lambda e: e.rel.split("/"))


class _Sink:
    """The tar stream's destination: hashes the tar, gzips it into memory."""

    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.tar_bytes = 0  # the uncompressed tar: what the unpacker bounds
        self.buffer = io.BytesIO()
        # No file name and mtime 0 in the gzip header; the OS byte is always 255.
        self.gz = gzip.GzipFile(filename="", mode="wb", fileobj=self.buffer, mtime=0,
                                compresslevel=GZIP_LEVEL)

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.tar_bytes += len(data)
        return self.gz.write(data)


def _tarinfo(e: _Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(e.rel)
    info.mtime = MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if e.kind == "dir":
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif e.kind == "link":
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, e.link
    else:
        info.type, info.mode = tarfile.REGTYPE, 0o755 if e.executable else 0o644
    return info


def _add_file(tar: tarfile.TarFile, root: str, e: _Entry, problems: list[str]) -> int:
    path = os.path.join(root, e.rel)
    try:
        # O_NOFOLLOW/O_NONBLOCK: a file swapped for a link or a FIFO since the walk is
        # neither followed nor waited on; fstat says what was really opened.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0))
    except OSError as e_:
        problems.append(f"{FIELD}: cannot read {path}: {e_.strerror or e_} "
                        "(fix its permissions or leave it out with .kdistignore)")
        return 0
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"{FIELD}: {path} changed while packing; try again")
            return 0
        info = _tarinfo(e)
        info.size = st.st_size
        try:
            tar.addfile(info, f)
        except OSError as e_:
            # Short read: the file shrank, or the read itself failed (EIO, EACCES on
            # some network file systems). The archive is discarded either way.
            raise WorkdirError([f"{FIELD}: cannot read {path}: {e_}"]) from None
        return st.st_size


def _count_of(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def _too_big(root: str, what: str, entries: list[_Entry]) -> WorkdirError:
    files = [e for e in entries if e.kind == "file"]
    biggest = sorted(files, key=lambda e: (-e.size, e.rel))[:5]
    names = ", ".join(f"{e.rel} ({_human(e.size)})" for e in biggest) or "none"
    return WorkdirError([f"{FIELD}: {root} {what}; biggest files: {names}; {ALTERNATIVES}"])


def pack(root: Path | str, *, limit: int = DEFAULT_LIMIT) -> Packed:
    """Pack the directory `root` reproducibly; see the module docstring for the rules.

    Raises WorkdirError (exit code 2) when `root` is not a directory, when it holds more
    than MAX_FILES entries or MAX_UNPACKED_BYTES after ignore rules, when a file cannot be
    read (every such file is named: a silently missing module would fail later, on the
    cluster, far from its cause), or when the archive is over `limit` bytes compressed.
    Symlinks leaving the tree, dangling or absolute ones, and special files are skipped,
    each with a line in `Packed.warnings`.
    """
    given = str(root)
    if not os.path.isdir(root):
        what = "does not exist" if not os.path.lexists(root) else "is not a directory"
        raise WorkdirError([f"{FIELD}: {given} {what}"])
    real_root = os.path.realpath(root)
    walk = _Walk(real_root)
    walk.run()
    if walk.problems:
        raise WorkdirError(walk.problems)
    files = [e for e in walk.entries if e.kind != "dir"]
    total = sum(e.size for e in files)
    if total > MAX_UNPACKED_BYTES:
        raise _too_big(given, f"holds {_human(total)} in {_count_of(len(files))}, over the "
                       f"{_human(MAX_UNPACKED_BYTES)} uncompressed cap", walk.entries)

    sink = _Sink()
    problems: list[str] = []
    size = 0
    # A stream ("w|"): the tar goes through the sink (hash + gzip) as it is written.
    with tarfile.open(fileobj=cast(IO[bytes], sink), mode="w|",
                      format=tarfile.PAX_FORMAT) as tar:
        for e in walk.entries:
            if e.kind == "file":
                size += _add_file(tar, real_root, e, problems)
            else:
                tar.addfile(_tarinfo(e))
    sink.gz.close()
    if problems:
        raise WorkdirError(problems)
    if sink.tar_bytes > MAX_TAR_BYTES:  # grown since the walk, or long names' headers
        raise _too_big(given, f"makes a {_human(sink.tar_bytes)} tar, over the unpacker's "
                       f"{_human(MAX_TAR_BYTES)} cap", walk.entries)
    archive = sink.buffer.getvalue()
    if len(archive) > limit:
        raise _too_big(given, f"packs to {_human(len(archive))} compressed "
                       f"({_human(size)} uncompressed), over the {_human(limit)} cap",
                       walk.entries)
    return Packed(archive=archive, sha256=sink.sha.hexdigest(), files=len(files), size=size,
                  warnings=tuple(walk.warnings), root=given,
                  names=frozenset(e.rel for e in walk.entries))


def pack_workdir(job: TrainingJob, workdir: Path | str | None = None, *,
                 limit: int = DEFAULT_LIMIT) -> Packed | None:
    """The job's code, packed: `workdir` (the --workdir flag, relative to the current
    directory) wins over spec.workdir (which load_job made relative to the job file).

    None when neither names a directory. Problems name the field they came from.
    """
    origin, root = ("--workdir", workdir) if workdir is not None else (FIELD, job.spec.workdir)
    if root is None:
        return None
    try:
        packed = pack(root, limit=limit)
    except WorkdirError as e:
        if origin == FIELD:
            raise
        raise WorkdirError([origin + p[len(FIELD):] if p.startswith(FIELD) else p
                            for p in e.problems]) from None
    return replace(packed, origin=origin)
