"""Print JobSet's webhook configurations for an out-of-cluster controller (used by jobset.sh).

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
    """Apply the kustomization's JSON patches (only "replace /webhooks/N", as upstream's are)."""
    by_kind_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for patch in kustomization.get("patches") or []:
        target = patch["target"]
        doc = by_kind_name[(target["kind"], target["name"])]
        for op in yaml.safe_load((base / patch["path"]).read_text()):
            parts = op["path"].strip("/").split("/")
            if op["op"] != "replace" or len(parts) != 2 or parts[0] != "webhooks":
                raise ValueError(f"unsupported patch in {patch['path']}: {op}")
            doc["webhooks"][int(parts[1])] = op["value"]


def rewrite(docs: list[dict[str, Any]], url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The webhook configurations in `docs`, pointed at `url`, as described above."""
    ca = base64.b64encode(ca_pem).decode()
    for doc in docs:
        for webhook in doc["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": url.rstrip("/") + path, "caBundle": ca}
            webhook.setdefault("timeoutSeconds", 10)
        doc["metadata"]["name"] = NAME_PREFIX + doc["metadata"]["name"]
    return docs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--webhook-dir", type=Path, required=True, help="upstream config/components/webhook"
    )
    p.add_argument("--url", required=True, help="base URL of the controller's webhook server")
    p.add_argument("--ca", type=Path, required=True, help="PEM CA that signed its serving cert")
    args = p.parse_args(argv)
    manifests = args.webhook_dir / "manifests.yaml"
    docs = [d for d in yaml.safe_load_all(manifests.read_text()) if d and d.get("webhooks")]
    if not docs:
        print(f"no webhook configuration in {manifests}", file=sys.stderr)
        return 1
    kustomization = yaml.safe_load((args.webhook_dir / "kustomization.yaml").read_text())
    apply_patches(docs, kustomization, args.webhook_dir)
    yaml.safe_dump_all(rewrite(docs, args.url, args.ca.read_bytes()), sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
