"""What the CLI's batch submit (`kdist.cli.submitting`) needs from the layers below,
re-exported here so the CLI reaches them only through the API (the import contract)."""

from __future__ import annotations

from kdist.api.jobs import undo
from kdist.kube.connect.config import ClusterOptions, KubeConfig, resolve_namespace
from kdist.kube.watch.sources import wait_gone
from kdist.rendering import to_yaml
from kdist.spec.model import TrainingJob

__all__ = ["ClusterOptions", "KubeConfig", "TrainingJob", "resolve_namespace", "to_yaml",
           "undo", "wait_gone"]
