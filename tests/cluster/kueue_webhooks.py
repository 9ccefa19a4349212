"""Print Kueue's webhook configurations for an out-of-cluster Kueue (used by kueue.sh).

Reads upstream's config/components/webhook/manifests.yaml (from Kueue's Go
module) and keeps the webhooks the test cluster's Kueue serves: its own
objects (kueue.x-k8s.io) and the integrations enabled in kueue.sh's config
(batch Jobs, PyTorchJobs, JobSets, TrainJobs). A webhook the server does not serve would
fail every matching request (failurePolicy: Fail), so nothing else is
registered. Each one is pointed at Kueue's server on the host by URL with our
CA, and gets upstream kustomize's namespaceSelector (not kube-system, not
Kueue's namespace).

One deliberate difference from upstream: the Job, PyTorchJob, JobSet and TrainJob webhooks
only see objects that carry the queue-name label. With manageJobsWithoutQueueName
off, Kueue leaves every other job alone anyway, and this way a Kueue that is
down or restarting cannot refuse the rest of the e2e suite's jobs.
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path
from typing import Any

import yaml

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: (API group, resource) of the integrations enabled in kueue.sh's config.
INTEGRATIONS = {("batch", "jobs"), ("kubeflow.org", "pytorchjobs"), ("jobset.x-k8s.io", "jobsets"),
                ("trainer.kubeflow.org", "trainjobs")}
KUEUE_GROUP = "kueue.x-k8s.io"
#: Upstream's names carry kustomize's "kueue-" prefix.
NAME_PREFIX = "kueue-"


def _served(webhook: dict[str, Any]) -> str | None:
    """'own' for Kueue's objects, 'integration' for the enabled kinds, None to drop it."""
    kinds = {
        (g, r.split("/")[0])
        for rule in webhook["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    if kinds and all(g == KUEUE_GROUP for g, _ in kinds):
        return "own"
    if kinds and kinds <= INTEGRATIONS:
        return "integration"
    return None


def rewrite(
    docs: list[dict[str, Any]], url: str, ca_pem: bytes, exclude_namespaces: list[str]
) -> list[dict[str, Any]]:
    """The webhook configurations in `docs`, pointed at `url`, as described above."""
    ca = base64.b64encode(ca_pem).decode()
    out = []
    for doc in docs:
        kept = []
        for webhook in doc.get("webhooks") or []:
            kind = _served(webhook)
            if kind is None:
                continue
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": url.rstrip("/") + path, "caBundle": ca}
            if kind == "integration":
                webhook["namespaceSelector"] = {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": list(exclude_namespaces),
                        }
                    ]
                }
                webhook["objectSelector"] = {
                    "matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]
                }
            kept.append(webhook)
        if kept:
            doc["metadata"]["name"] = NAME_PREFIX + doc["metadata"]["name"]
            doc["webhooks"] = kept
            out.append(doc)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--manifests", type=Path, required=True, help="upstream manifests.yaml")
    p.add_argument("--url", required=True, help="base URL of Kueue's webhook server")
    p.add_argument("--ca", type=Path, required=True, help="PEM CA that signed its serving cert")
    p.add_argument("--exclude-namespace", action="append", default=[], dest="exclude")
    args = p.parse_args(argv)
    docs = [d for d in yaml.safe_load_all(args.manifests.read_text()) if d]
    out = rewrite(docs, args.url, args.ca.read_bytes(), args.exclude)
    if not out:
        print(
            f"no webhook of Kueue's own or of {sorted(INTEGRATIONS)} in {args.manifests}",
            file=sys.stderr,
        )
        return 1
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
