"""Print JobSet's webhook configurations for an out-of-cluster controller (used by jobset.sh;
trainer.sh prints Kubeflow Trainer's with it too: --webhook-dir manifests/base/webhook, no prefix).

Reads upstream's config/components/webhook/ from JobSet's Go module: manifests.yaml
and the JSON patches its kustomization.yaml applies (they give the Pod webhooks an
objectSelector, so only pods of a JobSet reach them), applied here as kustomize
would. Every webhook is kept (the controller serves all four: JobSets and their
pods), pointed at the controller's server on the host by URL with our CA, and
named with kustomize's "jobset-" prefix.
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from typing import Any

import yaml

#: Upstream's names carry kustomize's "jobset-" prefix.
NAME_PREFIX = "jobset-"


def apply_patches(docs: list[dict[str, Any]], kustomization: dict[str, Any], base: Path) -> None:
    """Apply the kustomization's JSON patches (RFC 6902 "replace" and "add", as upstream's
    are) to their target: by kind, and by name where the target names one."""
    for patch in kustomization.get("patches") or []:
        target = patch["target"]
        for doc in docs:
            if doc["kind"] != target["kind"] or \
                    target.get("name", doc["metadata"]["name"]) != doc["metadata"]["name"]:
                continue
            for op in yaml.safe_load((base / patch["path"]).read_text()):
                if op["op"] not in ("replace", "add"):
                    raise ValueError(f"unsupported patch in {patch['path']}: {op}")
                *parents, last = op["path"].strip("/").split("/")
                node: Any = doc
                for part in parents:
                    node = node[int(part)] if isinstance(node, list) else node[part]
                if isinstance(node, list):
                    node[int(last)] = op["value"]
                else:
                    node[last] = op["value"]


def rewrite(docs: list[dict[str, Any]], url: str, ca_pem: bytes,
            prefix: str = NAME_PREFIX) -> list[dict[str, Any]]:
    """The webhook configurations in `docs`, pointed at `url`, as described above."""
    ca = base64.b64encode(ca_pem).decode()
    for doc in docs:
        for webhook in doc["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": url.rstrip("/") + path, "caBundle": ca}
            webhook.setdefault("timeoutSeconds", 10)
        doc["metadata"]["name"] = prefix + doc["metadata"]["name"]
    return docs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--webhook-dir", type=Path, required=True, help="upstream config/components/webhook"
    )
    p.add_argument("--url", required=True, help="base URL of the controller's webhook server")
    p.add_argument("--ca", type=Path, required=True, help="PEM CA that signed its serving cert")
    p.add_argument("--prefix", default=NAME_PREFIX,
                   help="put before each configuration's name (kustomize's namePrefix)")
    args = p.parse_args(argv)
    manifests = args.webhook_dir / "manifests.yaml"
    docs = [d for d in yaml.safe_load_all(manifests.read_text()) if d and d.get("webhooks")]
    if not docs:
        print(f"no webhook configuration in {manifests}", file=sys.stderr)
        return 1
    kustomization = yaml.safe_load((args.webhook_dir / "kustomization.yaml").read_text())
    apply_patches(docs, kustomization, args.webhook_dir)
    docs = rewrite(docs, args.url, args.ca.read_bytes(), args.prefix)
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
