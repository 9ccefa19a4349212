"""Write a one-layer image archive (`docker save` format) that
`ctr images import` accepts, from a few files on the host, with no daemon.

Used for the pause image and the operator's init-container image: both are a
single static binary, so no base image and no registry are needed.

    python3 mkimage.py --tag NAME:TAG --out FILE.tar --entrypoint /bin \
        [--user UID:GID] [--label K=V] SRC:DEST ...
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import tarfile


def layer_tar(files: list[tuple[str, str]]) -> bytes:
    """A reproducible tar of the given (host path, image path) pairs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for src, dest in files:
            info = tar.gettarinfo(src, arcname=dest.lstrip("/"))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.mode = 0o755
            with open(src, "rb") as f:
                tar.addfile(info, f)
    return buf.getvalue()


def image_archive(tag: str, layer: bytes, config: dict) -> bytes:
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "tests/cluster/mkimage.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.split(":")[1] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]}]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in (
            (layer_name, layer),
            (config_name, config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--entrypoint", required=True)
    parser.add_argument("--user", default="")
    parser.add_argument("--label", action="append", default=[])
    parser.add_argument("files", nargs="+", help="SRC:DEST pairs")
    args = parser.parse_args()
    files = [tuple(f.split(":", 1)) for f in args.files]
    config = {
        "Entrypoint": [args.entrypoint],
        "User": args.user,
        "Labels": dict(kv.split("=", 1) for kv in args.label),
    }
    with open(args.out, "wb") as f:
        f.write(image_archive(args.tag, layer_tar(files), config))


if __name__ == "__main__":
    main()
