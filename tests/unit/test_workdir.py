"""spec.workdir: reproducible packing, ignore rules, what is never read, ConfigMaps, unpacking."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import kdist.rendering.workdir
from kdist.rendering.code_configmaps import CHUNK_BYTES, code_volume, to_configmaps
from kdist.rendering.workdir import MTIME, Packed, WorkdirError, pack
from kdist.runtime.workdir import (
    MAX_FILES,
    UnpackError,
    part_key,
    unpack,
    unpack_from_env,
    use_shipped_code,
)
from kdist.shared import env as E
from kdist.shared import labels as L
from kdist.shared.errors import LaunchError, SpecError
from kdist.shared.names import DNS1123_SUBDOMAIN

LABELS = {"kdist.dev/job-name": "train", "app.kubernetes.io/managed-by": "kdist"}
LONG = "deep/" + "x" * 60 + "/" + "y" * 60 + "/module.py"  # > 100 chars: needs a pax header


def write(root: Path, rel: str, data: bytes | str = b"", mode: int | None = None) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        path.chmod(mode)
    return path


def make_tree(root: Path, *, reverse: bool = False) -> None:
    """A small project; `reverse` creates it in the opposite order (other inode/dirent order)."""
    files = [
        ("train.py", "print('v1')\n", 0o644),
        ("run.sh", "#!/bin/sh\necho hi\n", 0o755),
        ("pkg/__init__.py", "", 0o600),
        ("pkg/model.py", "W = 1\n" * 50, 0o664),
        ("pkg/weights.bin", bytes(range(256)) * 40, 0o640),
        ("données/café.txt", "unicode names\n", 0o644),
        (LONG, "long = True\n", 0o644),
    ]
    for rel, data, mode in reversed(files) if reverse else files:
        write(root, rel, data, mode)
    (root / "empty").mkdir()


def members(packed: Packed) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(packed.archive), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def content(packed: Packed, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(packed.archive), mode="r:gz") as tar:
        f = tar.extractfile(name)
        assert f is not None
        return f.read()


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root: kind, exec bit and content (or link target); not followed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", bool(st.st_mode & 0o100), p.read_bytes())
    return out


# --- reproducibility ---------------------------------------------------------------------


def test_same_tree_gives_the_same_bytes_anywhere(tmp_path):
    a, b = tmp_path / "a", tmp_path / "elsewhere" / "b"
    make_tree(a)
    old = os.umask(0o077)  # another user's umask: other permission bits on b's files
    try:
        make_tree(b, reverse=True)
    finally:
        os.umask(old)
    for i, p in enumerate(sorted(b.rglob("*"))):
        os.utime(p, (1_000_000 + i, 1_000_000 + i), follow_symlinks=False)
    first, again, other = pack(a), pack(a), pack(b)
    assert first.archive == again.archive == other.archive
    assert first.sha256 == other.sha256
    # The hash names the uncompressed tar, so it does not depend on the zlib build.
    assert first.sha256 == hashlib.sha256(gzip.decompress(first.archive)).hexdigest()
    assert first.files == 7 and first.size == sum(
        len(content(first, n)) for n, m in members(first).items() if m.isreg())


def test_a_changed_file_changes_the_hash(tmp_path):
    make_tree(tmp_path)
    before = pack(tmp_path).sha256
    write(tmp_path, "train.py", "print('v2')\n")
    assert pack(tmp_path).sha256 != before


def test_headers_are_normalised(tmp_path):
    make_tree(tmp_path)
    packed = pack(tmp_path)
    # gzip header: no FNAME flag, mtime 0.
    assert packed.archive[3] == 0 and packed.archive[4:8] == b"\0\0\0\0"
    got = members(packed)
    assert list(got) == sorted(got, key=lambda n: n.split("/"))
    for m in got.values():
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (MTIME, 0, 0, "", "")
    assert got["train.py"].mode == 0o644
    assert got["pkg/__init__.py"].mode == 0o644  # 0600 at home is still readable in the pod
    assert got["run.sh"].mode == 0o755
    assert got["pkg"].isdir() and got["pkg"].mode == 0o755
    assert got["empty"].isdir()
    assert LONG in got and "données/café.txt" in got


# --- what is left out --------------------------------------------------------------------


def test_ignore_rules(tmp_path):
    for rel in ["main.py", "app.log", "keep.log", "build/out.o", "logs", "gen.py",
                "data/big.csv", "secret.txt", "sub/local.py", "sub/x.log", "sub/important.log",
                "sub/mod.py", "nested/build/y.py", "excluded/keep.py",
                ".git/config", "sub/.git", ".hg/store", ".svn/entries",
                "__pycache__/main.cpython-311.pyc", "pkg/__pycache__/m.pyc", "stale.pyc",
                ".kdist/train/checkpoints/step-1/model.pt", ".gitignore", ".kdistignore"]:
        write(tmp_path, rel, rel)
    (tmp_path / ".gitignore").write_text(
        "*.log\n!keep.log\nbuild/\nlogs/\ngen.py\nexcluded/\n!excluded/keep.py\n")
    (tmp_path / ".kdistignore").write_text("data/\n/secret.txt\n!gen.py\n!.git\n")
    write(tmp_path, "sub/.gitignore", "local.py\n!important.log\n")
    names = set(members(pack(tmp_path)))
    assert names == {
        ".gitignore", ".kdistignore", "main.py", "keep.log", "logs", "gen.py",
        "sub", "sub/.gitignore", "sub/important.log", "sub/mod.py", "nested",
        "pkg",
    }
    # Why each is out: *.log; !keep.log re-includes; build/ anywhere; logs/ matches only a
    # directory (the file stays); .kdistignore's !gen.py beats .gitignore in the same
    # directory; nothing re-includes a file inside an excluded directory (git's rule), nor
    # a VCS folder, a cache or .kdist/.


def test_a_missing_or_non_directory_root_is_refused(tmp_path):
    with pytest.raises(WorkdirError) as e:
        pack(tmp_path / "nope")
    assert e.value.problems == [f"spec.workdir: {tmp_path / 'nope'} does not exist"]
    assert e.value.exit_code == 2 and isinstance(e.value, SpecError)
    write(tmp_path, "file.py")
    with pytest.raises(WorkdirError, match="is not a directory"):
        pack(tmp_path / "file.py")


def test_too_many_files_is_refused_early(tmp_path, monkeypatch):
    assert MAX_FILES == 20_000
    # 20,001 files take seconds to make
    monkeypatch.setattr(kdist.rendering.workdir, "MAX_FILES", 50)
    for i in range(51):
        (tmp_path / f"f{i}").touch()
    with pytest.raises(WorkdirError, match="more than 50 files and directories"):
        pack(tmp_path)
    (tmp_path / "f0").unlink()
    assert pack(tmp_path).files == 50


# --- links, special and unreadable files -------------------------------------------------


def test_symlinks_inside_are_kept_outside_never_followed(tmp_path):
    root = tmp_path / "proj"
    write(tmp_path, "outside.txt", "SECRET-OUTSIDE")
    write(root, "real.py", "REAL")
    write(root, "sub/mod.py", "MOD")
    write(root, "ignored.tmp", "IGNORED")
    (root / ".kdistignore").write_text("*.tmp\n")
    links = {
        "alias.py": "real.py",            # file inside
        "sub/up.py": "../real.py",        # through a parent, inside
        "lnk": "sub",                     # directory inside: kept as a link, not walked
        "chain.py": "alias.py",           # link to a link: stored to the final target
        "self": ".",                      # the root itself
        "out.txt": "../outside.txt",      # relative, leaves the tree
        "abs": str(tmp_path / "outside.txt"),  # absolute
        "etc": "/etc",
        "dangling.py": "missing.py",
        "loop1": "loop2", "loop2": "loop1",
        "to_ignored": "ignored.tmp",      # its target is not shipped
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
    packed = pack(root)
    got = members(packed)
    kept = {n: m.linkname for n, m in got.items() if m.issym()}
    assert kept == {"alias.py": "real.py", "sub/up.py": "../real.py", "lnk": "sub",
                    "chain.py": "real.py", "self": "."}
    assert b"SECRET-OUTSIDE" not in gzip.decompress(packed.archive)
    skipped = {w.split(":")[0] for w in packed.warnings}
    assert skipped == {"out.txt", "abs", "etc", "dangling.py", "loop1", "loop2", "to_ignored"}
    assert any("absolute" in w for w in packed.warnings if w.startswith("abs:"))
    assert any("outside" in w for w in packed.warnings if w.startswith("out.txt:"))


@pytest.mark.timeout(10)
def test_a_fifo_is_skipped_never_opened(tmp_path):
    write(tmp_path, "main.py", "x")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "to_pipe").symlink_to("pipe")
    packed = pack(tmp_path)  # opening the FIFO would block here until the timeout
    assert set(members(packed)) == {"main.py"}
    assert any(w.startswith("pipe: skipped") for w in packed.warnings)
    assert any(w.startswith("to_pipe: skipped") for w in packed.warnings)


# Root reads a chmod-000 file anyway; without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH it cannot.
DROP_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search",
            "--inh-caps=-dac_override,-dac_read_search"]
UNREADABLE_CHILD = """
import sys
from kdist.rendering.workdir import WorkdirError, pack
try:
    open(sys.argv[2], "rb").close()
    sys.exit(77)  # still readable: the capability drop did not take
except PermissionError:
    pass
try:
    pack(sys.argv[1])
except WorkdirError as e:
    print(e)
    sys.exit(e.exit_code)
"""


def pack_unreadable(root: Path, probe: Path) -> tuple[int, str]:
    """Pack `root` where `probe` really cannot be read: (exit code, message)."""
    pkg_root = str(Path(sys.modules["kdist.rendering.workdir"].__file__).parents[2])
    cmd = [sys.executable, "-c", UNREADABLE_CHILD, str(root), str(probe)]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root and setpriv is missing: cannot make a file unreadable")
        cmd = DROP_DAC + cmd
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([pkg_root, os.environ.get("PYTHONPATH",
                                                                                  "")])}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, timeout=60)
    if r.returncode == 77 or "Operation not permitted" in r.stderr:
        pytest.skip("cannot drop root's read-anything capability here")
    return r.returncode, r.stdout + r.stderr


def test_an_unreadable_file_is_refused_by_name(tmp_path):
    write(tmp_path, "ok.py", "x")
    secret = write(tmp_path, "private/key.pem", "k", mode=0o000)
    code, out = pack_unreadable(tmp_path, secret)
    assert code == 2, out
    assert f"spec.workdir: cannot read {secret}: Permission denied" in out
    assert ".kdistignore" in out


def test_an_unreadable_directory_is_refused_by_name(tmp_path):
    write(tmp_path, "ok.py", "x")
    locked = write(tmp_path, "locked/a.py", "a").parent
    locked.chmod(0o000)
    try:
        code, out = pack_unreadable(tmp_path, locked / "a.py")
    finally:
        locked.chmod(0o755)
    assert code == 2, out
    assert f"cannot list {locked}" in out


# --- the size cap ------------------------------------------------------------------------


def test_over_the_cap_names_the_biggest_files(tmp_path):
    sizes = {"a.bin": 300, "b.bin": 250, "c.bin": 200, "d.bin": 150, "e.bin": 100, "f.bin": 50}
    for name, kib in sizes.items():
        write(tmp_path, f"data/{name}", os.urandom(kib * 1024))  # incompressible
    with pytest.raises(WorkdirError) as e:
        pack(tmp_path, limit=512 * 1024)
    (line,) = e.value.problems
    assert "packs to 1.0 MiB compressed (1.0 MiB uncompressed), over the 512.0 KiB cap" in line
    assert ("biggest files: data/a.bin (300.0 KiB), data/b.bin (250.0 KiB), data/c.bin "
            "(200.0 KiB), data/d.bin (150.0 KiB), data/e.bin (100.0 KiB);") in line
    assert "f.bin" not in line
    assert "bake the code into the image, or put it on a PVC" in line
    assert e.value.exit_code == 2


def test_huge_uncompressed_is_refused_before_reading(tmp_path):
    with open(tmp_path / "sparse.img", "wb") as f:
        f.truncate(300 * 2**20)  # sparse: no disk used, and it is never read
    with pytest.raises(WorkdirError, match=r"holds 300\.0 MiB in 1 file, over the 256\.0 MiB "
                                           r"uncompressed cap; biggest files: sparse\.img"):
        pack(tmp_path)


# --- ConfigMaps --------------------------------------------------------------------------


def test_configmaps_fit_the_api_and_kubectl_apply(tmp_path):
    write(tmp_path, "blob.bin", os.urandom(int(2.5 * CHUNK_BYTES)))
    packed = pack(tmp_path)
    cms = to_configmaps("train", "ml", packed, LABELS)
    assert len(cms) == 3
    for i, cm in enumerate(cms):
        meta = cm["metadata"]
        assert meta["name"] == f"train-code-{packed.sha256[:10]}-{i}"
        assert DNS1123_SUBDOMAIN.fullmatch(meta["name"]) and len(meta["name"]) <= 253
        assert meta["namespace"] == "ml" and meta["labels"] == LABELS
        assert meta["labels"] is not LABELS
        assert meta["annotations"] == {L.CODE_SHA256: packed.sha256,
                                       L.CODE_PART: str(i), L.CODE_PARTS: "3"}
        assert cm["immutable"] is True
        (key,) = cm["binaryData"]
        assert key == part_key(i, 3)
        assert len(base64.b64decode(cm["binaryData"][key])) <= CHUNK_BYTES
        # Client-side kubectl apply stores the object in an annotation: 256 KiB for all.
        assert len(json.dumps(cm, separators=(",", ":"))) < 262_144 - 16_384
    joined = b"".join(base64.b64decode(next(iter(c["binaryData"].values()))) for c in cms)
    assert joined == packed.archive
    # The longest job name still gives a valid name (a subdomain: up to 253, not 63).
    for cm in to_configmaps("j" * 50, "ml", packed, {}):
        assert DNS1123_SUBDOMAIN.fullmatch(cm["metadata"]["name"])


def test_code_volume_projects_every_part_into_one_directory(tmp_path):
    write(tmp_path, "blob.bin", os.urandom(3000))
    cms = to_configmaps("train", "ml", pack(tmp_path), LABELS, chunk_bytes=1024)
    vol = code_volume(cms)
    assert vol["name"] == "kdist-code"
    assert [s["configMap"]["name"] for s in vol["projected"]["sources"]] == [
        c["metadata"]["name"] for c in cms]
    assert [s["configMap"]["items"] for s in vol["projected"]["sources"]] == [
        [{"key": part_key(i, len(cms)), "path": part_key(i, len(cms))}] for i in range(len(cms))]


def test_chunk_size_is_bounded(tmp_path):
    write(tmp_path, "a.py", "a")
    with pytest.raises(ValueError):
        to_configmaps("train", "ml", pack(tmp_path), {}, chunk_bytes=2**20)


def mount_like_kubelet(configmaps: list[dict], mount: Path) -> Path:
    """Write the parts the way a projected ConfigMap volume shows them: links into ..data."""
    data = mount / "..2026_01_01_00_00_00.000000001"
    data.mkdir(parents=True)
    (mount / "..data").symlink_to(data.name)
    for cm in configmaps:
        for key, b64 in cm["binaryData"].items():
            (data / key).write_bytes(base64.b64decode(b64))
            (mount / key).symlink_to(f"..data/{key}")
    return mount


# --- unpacking ---------------------------------------------------------------------------


def test_round_trip_through_configmaps(tmp_path):
    src = tmp_path / "src"
    make_tree(src)
    write(src, "blob.bin", os.urandom(40_000))
    (src / "alias.py").symlink_to("train.py")
    (src / "pkglink").symlink_to("pkg")
    packed = pack(src)
    cms = to_configmaps("train", "ml", packed, LABELS, chunk_bytes=7_000)
    assert len(cms) > 3
    mount = mount_like_kubelet(cms, tmp_path / "mount")
    dest = tmp_path / "workspace"
    unpack([mount], packed.sha256, dest)
    assert snapshot(dest) == snapshot(src)
    # Repacking the unpacked tree gives the very same archive.
    assert pack(dest).archive == packed.archive


def test_unpack_from_env(tmp_path):
    write(tmp_path / "src", "train.py", "v1")
    packed = pack(tmp_path / "src")
    mount = mount_like_kubelet(to_configmaps("t", "ns", packed, {}), tmp_path / "mount")
    assert unpack_from_env({}) is None
    env = {E.CODE_SHA256: packed.sha256, E.CODE_SRC: str(mount),
           E.CODE_DIR: str(tmp_path / "ws")}
    assert unpack_from_env(env) == tmp_path / "ws"
    assert (tmp_path / "ws" / "train.py").read_text() == "v1"


def test_a_pod_restarted_in_place_unpacks_its_code_again_over_its_own(tmp_path):
    """The emptyDir outlives an in-place restart: what this pod's earlier start unpacked
    (and wrote there) goes; a directory kdist did not fill is still refused."""
    write(tmp_path / "src", "train.py", "v1")
    packed = pack(tmp_path / "src")
    mount = mount_like_kubelet(to_configmaps("t", "ns", packed, {}), tmp_path / "mount")
    (tmp_path / "restarts").mkdir()
    env = {E.CODE_SHA256: packed.sha256, E.CODE_SRC: str(mount),
           E.CODE_DIR: str(tmp_path / "ws"), E.RESTART_DIR: str(tmp_path / "restarts")}
    assert unpack_from_env(env) == tmp_path / "ws"
    write(tmp_path / "ws", "out/written-by-the-run.txt", "x")
    (tmp_path / "ws" / "train.py").write_text("changed by the run")
    assert unpack_from_env(env) == tmp_path / "ws"  # the kubelet restarted it in place
    assert (tmp_path / "ws" / "train.py").read_text() == "v1"
    assert not (tmp_path / "ws" / "out").exists()
    other = {**env, E.CODE_DIR: str(tmp_path / "theirs")}
    write(tmp_path / "theirs", "keep.txt", "not kdist's")
    with pytest.raises(UnpackError, match="not empty"):
        unpack_from_env(other)
    assert (tmp_path / "theirs" / "keep.txt").read_text() == "not kdist's"


def parts_dir(tmp_path: Path, archive: bytes, name: str = "mount") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / part_key(0, 1)).write_bytes(archive)
    return d


def test_a_hash_mismatch_is_refused_before_extracting(tmp_path):
    write(tmp_path / "src", "train.py", "v1")
    packed = pack(tmp_path / "src")
    dest = tmp_path / "ws"
    with pytest.raises(UnpackError, match="hash mismatch: expected 0{64}, got " + packed.sha256):
        unpack([parts_dir(tmp_path, packed.archive)], "0" * 64, dest)
    assert not dest.exists()


@pytest.mark.parametrize("names, problem", [
    ([part_key(0, 2)], r"missing \[1\]"),
    ([part_key(0, 1), part_key(1, 1)], r"unexpected \[1\]"),
    ([part_key(0, 2), part_key(1, 3)], "disagree on their count"),
    ([], "no code parts"),
])
def test_incomplete_parts_are_refused(tmp_path, names, problem):
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    (tmp_path / "unrelated.txt").write_bytes(b"x")
    with pytest.raises(UnpackError, match=problem):
        unpack([tmp_path], "0" * 64, tmp_path / "ws")


def test_a_part_found_twice_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / part_key(0, 1)).write_bytes(b"x")
    (b / part_key(0, 1)).write_bytes(b"x")
    with pytest.raises(UnpackError, match="found twice"):
        unpack([a, b], "0" * 64, tmp_path / "ws")


def test_a_truncated_archive_is_refused(tmp_path):
    write(tmp_path / "src", "blob", os.urandom(5000))
    packed = pack(tmp_path / "src")
    with pytest.raises(UnpackError, match="not a complete gzip archive"):
        unpack([parts_dir(tmp_path, packed.archive[:-100])], packed.sha256, tmp_path / "ws")


def test_a_non_empty_destination_is_refused(tmp_path):
    write(tmp_path / "src", "train.py", "v2")
    packed = pack(tmp_path / "src")
    write(tmp_path / "ws", "train.py", "v1")
    with pytest.raises(UnpackError, match="not empty"):
        unpack([parts_dir(tmp_path, packed.archive)], packed.sha256, tmp_path / "ws")
    assert (tmp_path / "ws" / "train.py").read_text() == "v1"


def hostile(*entries: tuple[str, bytes, dict]) -> tuple[bytes, str]:
    """A gzip'd tar built by hand: (name, data, TarInfo attributes) each; and its tar's sha256."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, attrs in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            for k, v in attrs.items():
                setattr(info, k, v)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return gzip.compress(raw.getvalue()), hashlib.sha256(raw.getvalue()).hexdigest()


SYM = tarfile.SYMTYPE


@pytest.mark.parametrize("entries, problem", [
    ([("../evil.txt", b"x", {})], "unsafe path '../evil.txt'"),
    ([("ok/../../evil.txt", b"x", {})], "unsafe path"),
    ([("/tmp/evil.txt", b"x", {})], "unsafe path '/tmp/evil.txt'"),
    ([("l", b"", {"type": SYM, "linkname": "/etc"})], "link 'l' -> '/etc' leaving the tree"),
    ([("a/l", b"", {"type": SYM, "linkname": "../../evil"})], "leaving the tree"),
    ([("h", b"", {"type": tarfile.LNKTYPE, "linkname": "/etc/passwd"})],
     "neither a file, a directory nor a symlink"),
    ([("dev", b"", {"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3})], "neither a file"),
    ([("fifo", b"", {"type": tarfile.FIFOTYPE})], "neither a file"),
    ([("suid", b"x", {"mode": 0o4755})], "special mode bits"),
    ([("a.py", b"1", {}), ("a.py", b"2", {})], "'a.py' twice"),
    # Two names, one path: extraction would let the later one win.
    ([("a", b"1", {}), ("./a", b"2", {})], "'a' and './a', one path"),
    ([("d/a", b"1", {}), ("d//./a", b"2", {})], "'d/a' and 'd//./a', one path"),
    ([("d", b"", {"type": tarfile.DIRTYPE, "mode": 0o755}), ("./d/", b"x", {})], "one path"),
    # Each link alone stays inside; together `e` leaves: caught against the real tree.
    ([("sub", b"", {"type": tarfile.DIRTYPE, "mode": 0o755}),
      ("sub/up", b"", {"type": SYM, "linkname": ".."}),
      ("e", b"", {"type": SYM, "linkname": "sub/up/.."}),
      ("e/evil.txt", b"x", {})], "refused"),
])
def test_hostile_archives_are_refused(tmp_path, entries, problem):
    archive, sha = hostile(*entries)
    dest = tmp_path / "box" / "ws"
    with pytest.raises(UnpackError, match=problem):
        unpack([parts_dir(tmp_path, archive)], sha, dest)
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "box" / "evil.txt").exists()
    assert not Path("/tmp/evil.txt").exists()


def test_two_names_for_one_path_fail_the_launcher_with_exit_2(tmp_path, monkeypatch):
    """`a` then `./a`: extracted, the later one would silently win; the launcher refuses
    the archive (LaunchError, exit 2) and writes nothing."""
    archive, sha = hostile(("a", b"first", {}), ("./a", b"second", {}))
    monkeypatch.chdir(tmp_path)  # use_shipped_code would move into the code dir
    environ = {E.CODE_SHA256: sha, E.CODE_SRC: str(parts_dir(tmp_path, archive)),
               E.CODE_DIR: str(tmp_path / "ws")}
    with pytest.raises(LaunchError, match=r"^shipped code has 'a' and './a', one path; "
                                          r"refused$") as e:
        use_shipped_code(environ)
    assert e.value.exit_code == 2
    assert not any((tmp_path / "ws").iterdir())


@pytest.fixture
def without_data_filter(monkeypatch):
    """Python 3.10 before 3.10.12 has no tarfile extraction filters: the manual checks run."""
    monkeypatch.delattr(tarfile, "data_filter")


def test_round_trip_without_the_stdlib_filter(tmp_path, without_data_filter):
    src = tmp_path / "src"
    make_tree(src)
    (src / "pkglink").symlink_to("pkg")
    packed = pack(src)
    unpack([parts_dir(tmp_path, packed.archive)], packed.sha256, tmp_path / "ws")
    assert snapshot(tmp_path / "ws") == snapshot(src)


def test_a_link_through_a_link_is_refused_without_the_stdlib_filter(tmp_path,
                                                                     without_data_filter):
    archive, sha = hostile(("sub", b"", {"type": tarfile.DIRTYPE, "mode": 0o755}),
                           ("sub/up", b"", {"type": SYM, "linkname": ".."}),
                           ("e", b"", {"type": SYM, "linkname": "sub/up/.."}),
                           ("e/evil.txt", b"x", {}))
    with pytest.raises(UnpackError, match="link 'e' leaves"):
        unpack([parts_dir(tmp_path, archive)], sha, tmp_path / "box" / "ws")
    assert not (tmp_path / "box" / "evil.txt").exists()


def test_whatever_pack_accepts_the_pods_unpacker_accepts(tmp_path):
    """The packer refuses a name the unpacker would (one rule, kdist.shared.limits), at
    render time, instead of a job whose every pod fails unpacking."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "data\\set.py").write_text("x = 1\n")
    with pytest.raises(WorkdirError, match=r"has a backslash in its name, which the pods' "
                                           r"unpacker refuses"):
        pack(tmp_path)
    (tmp_path / ".kdistignore").write_text("data\\\\set.py\n")
    packed = pack(tmp_path)  # left out: the rest ships
    dest = tmp_path.parent / "unpacked"
    parts = tmp_path.parent / "parts"
    parts.mkdir()
    (parts / part_key(0, 1)).write_bytes(packed.archive)
    unpack([parts], packed.sha256, dest)
    assert (dest / "train.py").exists()


def test_the_packer_bounds_the_tar_as_the_unpacker_does(tmp_path, monkeypatch):
    (tmp_path / "a.py").write_text("x = 1\n" * 100)
    monkeypatch.setattr(kdist.rendering.workdir, "MAX_TAR_BYTES", 2048)
    with pytest.raises(WorkdirError, match=r"makes a .* tar, over the unpacker's 2.0 KiB cap"):
        pack(tmp_path)


def test_a_huge_ignore_file_is_refused_not_read(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    with open(tmp_path / ".gitignore", "wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB that take no disk
    with pytest.raises(WorkdirError, match=r"\.gitignore is over 1\.0 MiB; an ignore file "
                                           r"that large is not read"):
        pack(tmp_path)
