"""spec.runtime: kdist's container side shipped with the job, for any image with Python and torch.

Every pod runs kdist's launcher. With ``runtime: image`` it comes from the image
(``python -m kdist.launch``: kdist's own image, ``image/``). With ``runtime: shipped``
it travels with the job: the launcher, ``kdist.runtime``, ``kdist.workloads`` and
``kdist.shared`` (standard library and torch only; the import-linter contract
"The runtime stands apart" keeps them so) are zipped here, reproducibly, into one
immutable ConfigMap owned by the job (~180 KB; one object, so ``kubectl apply`` of
the rendered manifests keeps working: its base64 stays under the 256 KiB
last-applied annotation). The pod mounts it read-only and starts with BOOT, a
``python3 -c`` program in the container's own command line that

- refuses a Python older than 3.10 by name (exit 2),
- hashes the zip and refuses it unless its sha256 is the one in the command line
  (exit 2: the ConfigMap was replaced or tampered with; the pod spec, which holds the
  digest, cannot be changed after creation),
- puts the zip first on ``sys.path`` and on ``PYTHONPATH`` (the workers, which
  ``-m``-run kdist's workloads or ``import kdist``, get the same code; Python
  imports pure-Python packages from a zip as they are) and runs ``kdist.launch``.

The launcher then does what it does from an image: the torch check (exit 2 outside
the tested range), the workdir, restarts, preemption, exit codes.

``auto`` (the default) is ``image`` where ``spec.image`` is kdist's own image (its
repository is named ``kdist-train``, as ``image/`` builds it) and ``shipped`` for any
other. Committed manifests and golden files use kdist's image, so none of them
carries the zip (whose digest changes with every runtime change).
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kdist.shared import env as E

if TYPE_CHECKING:
    from kdist.spec.model import TrainingJob

__all__ = ["BOOT", "IMAGE_REPOSITORY", "Runtime", "boot_command", "built", "configmap",
           "configmap_name", "mode", "mount", "volume"]

#: The repository name of kdist's own image (image/Dockerfile; `make image`).
IMAGE_REPOSITORY = "kdist-train"
#: What the zip holds: the container side, closed under its imports (a test imports
#: every module from the zip alone).
MODULES = ("__init__.py", "launch.py")
PACKAGES = ("runtime", "workloads", "shared")
#: A fixed timestamp for every entry (zip's epoch): the same sources, the same bytes.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
VOLUME = "kdist-runtime"

# The bootstrap: standard library only, valid on any Python 3 (the version check must
# run to say its line), and small (it is in every pod's command). argv: [-c, digest,
# launcher arguments...]; exit 2 is kdist's "never retried" code (a bad spec or image).
BOOT = """\
import hashlib, os, runpy, sys
def fail(why):
    sys.stderr.write("kdist: " + why + "\\n")
    sys.exit(2)
if sys.version_info < (3, 10):
    fail("python %d.%d in this image; kdist's runtime needs 3.10 or newer" % sys.version_info[:2])
want, path = sys.argv[1], os.path.join(os.environ.get("{dir_env}", "{mount}"), "{zip}")
try:
    with open(path, "rb") as f:
        got = hashlib.sha256(f.read()).hexdigest()
except OSError as e:
    fail("cannot read the shipped runtime %s: %s" % (path, e))
if got != want:
    fail("the shipped runtime %s has sha256 %s, this pod was made for %s: refused (its "
         "ConfigMap was replaced or changed; resubmit the job)" % (path, got[:12], want[:12]))
sys.path.insert(0, path)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [path, os.environ.get("PYTHONPATH")]))
sys.argv = ["kdist.launch"] + sys.argv[2:]
runpy.run_module("kdist.launch", run_name="__main__", alter_sys=True)
""".replace("{dir_env}", E.RUNTIME_DIR).replace(
    "{mount}", E.DEFAULT_RUNTIME_MOUNT).replace("{zip}", E.RUNTIME_ZIP)


class Runtime:
    """The zipped runtime: its bytes and their sha256."""

    def __init__(self, data: bytes):
        self.data = data
        self.sha256 = hashlib.sha256(data).hexdigest()


def _sources(root: Path) -> list[Path]:
    files = [root / m for m in MODULES]
    for package in PACKAGES:
        files += sorted((root / package).rglob("*.py"), key=lambda p: p.relative_to(root).parts)
    return files


@lru_cache(maxsize=1)
def built() -> Runtime:
    """The runtime of this kdist, zipped: entries in a fixed order, a fixed date, mode 0644.

    Built from the installed package's own files, once per process (~50 ms).
    """
    root = Path(__file__).resolve().parent.parent  # the kdist package
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for path in _sources(root):
            info = zipfile.ZipInfo("kdist/" + path.relative_to(root).as_posix(), ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, path.read_bytes(), compresslevel=9)
    return Runtime(buffer.getvalue())


def mode(job: TrainingJob) -> Literal["image", "shipped"]:
    """spec.runtime with `auto` resolved: image for kdist's own image, shipped otherwise."""
    chosen = job.spec.runtime
    if chosen != "auto":
        return chosen
    return "image" if is_kdist_image(job.spec.image) else "shipped"


def is_kdist_image(image: str) -> bool:
    """Whether `image` names kdist's own image (any registry, tag or digest)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[0] == IMAGE_REPOSITORY


def boot_command(runtime: Runtime) -> list[str]:
    """The container's command: the bootstrap with the zip's digest (its args: the launcher's)."""
    return ["python3", "-c", BOOT, runtime.sha256]


def configmap_name(job_name: str, runtime: Runtime) -> str:
    return f"{job_name}-runtime-{runtime.sha256[:10]}"


def configmap(job_name: str, namespace: str | None, runtime: Runtime,
              labels: dict[str, str]) -> dict[str, Any]:
    """The zip as one immutable ConfigMap (owner references are the submitter's to add)."""
    from kdist.shared import labels as L

    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(job_name, runtime),
            **({"namespace": namespace} if namespace else {}),
            "labels": dict(labels),
            "annotations": {L.RUNTIME_SHA256: runtime.sha256},
        },
        "immutable": True,
        "binaryData": {E.RUNTIME_ZIP: base64.b64encode(runtime.data).decode("ascii")},
    }


def volume(name: str) -> dict[str, Any]:
    return {"name": VOLUME, "configMap": {"name": name, "defaultMode": 0o444}}


def mount() -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": E.DEFAULT_RUNTIME_MOUNT, "readOnly": True}
