"""A packed workdir as Kubernetes objects: ConfigMaps of its chunks, and the pod volume.

The archive (``kdist.rendering.workdir.Packed``) is split into immutable
ConfigMaps with one binaryData key each, ``part-NNNN-of-MMMM``
(``kdist.runtime.workdir.part_key``: the unpacker needs nothing else); one
projected volume mounts them all into one directory of the pod.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from kdist.runtime.workdir import part_key
from kdist.shared import labels as L

if TYPE_CHECKING:
    from kdist.rendering.workdir import Packed

__all__ = ["CHUNK_BYTES", "MAX_CHUNK_BYTES", "code_volume", "configmap_names", "to_configmaps"]

#: Raw bytes per ConfigMap. The API server takes up to 1 MiB of data per ConfigMap, but a
#: client-side ``kubectl apply`` of ``kdist render`` output copies the whole object into
#: the last-applied-configuration annotation, and all annotations together may hold at
#: most 256 KiB (262144 bytes). 176 KiB becomes 240,299 base64 characters, leaving ~21 KB
#: for names, labels and our own annotations. The cost: a 10 MiB archive is 59 objects.
CHUNK_BYTES = 176 * 2**10
#: The ceiling a caller may ask for: the API server's 1 MiB, less room for metadata.
MAX_CHUNK_BYTES = 768 * 2**10


def configmap_names(job_name: str, packed: Packed, *, chunk_bytes: int = CHUNK_BYTES) -> list[str]:
    """The ConfigMaps' names, ``<job>-code-<sha256[:10]>-<i>`` (what the pod's volume lists)."""
    count = max(1, -(-len(packed.archive) // chunk_bytes))
    return [f"{job_name}-code-{packed.sha256[:10]}-{i}" for i in range(count)]


def to_configmaps(job_name: str, namespace: str | None, packed: Packed,
                  labels: dict[str, str], *,
                  chunk_bytes: int = CHUNK_BYTES) -> list[dict]:
    """The archive as immutable ConfigMaps of at most `chunk_bytes` raw bytes each.

    Each carries one binaryData key, ``part-NNNN-of-MMMM`` (the unpacker needs nothing
    else), a copy of `labels`, and annotations with the full sha256 and the part's index
    and count. Names come from the job and the content, so an edited tree resubmitted
    gets new objects and a pod never mixes two versions. Owner references are the
    submitter's to add (they need the created job's uid). No namespace (None) leaves
    it out, as the rendered job does.
    """
    if not 1 <= chunk_bytes <= MAX_CHUNK_BYTES:
        raise ValueError(f"chunk_bytes must be 1..{MAX_CHUNK_BYTES}, got {chunk_bytes}")
    names = configmap_names(job_name, packed, chunk_bytes=chunk_bytes)
    count = len(names)
    out = []
    for i, name in enumerate(names):
        chunk = packed.archive[i * chunk_bytes:(i + 1) * chunk_bytes]
        out.append({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                **({"namespace": namespace} if namespace else {}),
                "labels": dict(labels),
                "annotations": {
                    L.CODE_SHA256: packed.sha256,
                    L.CODE_PART: str(i),
                    L.CODE_PARTS: str(count),
                },
            },
            "immutable": True,
            "binaryData": {part_key(i, count): base64.b64encode(chunk).decode("ascii")},
        })
    return out


def code_volume(configmaps: list[dict], name: str = "kdist-code") -> dict:
    """A pod volume projecting every part into one directory (mount it read-only at CODE_MOUNT).

    One projected volume rather than one volume per ConfigMap: one mount, and the
    unpacker reads a single directory. Projected volumes are allowed under Pod Security
    "restricted".
    """
    sources = []
    for cm in configmaps:
        (key,) = cm["binaryData"]
        sources.append({"configMap": {"name": cm["metadata"]["name"],
                                      "items": [{"key": key, "path": key}]}})
    return {"name": name, "projected": {"defaultMode": 0o444, "sources": sources}}
