"""CLI options shared by several verbs, declared once."""

from __future__ import annotations

from dataclasses import dataclass

import click


@dataclass(frozen=True)
class ClusterOptions:
    """Where to talk to, as kubectl's global flags say (None = kubeconfig's default)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None


def global_options(f):
    """--kubeconfig, --context, -n/--namespace, exactly as kubectl spells them."""
    f = click.option(
        "-n", "--namespace", metavar="NS",
        help="Namespace (default: the job's metadata.namespace, else the context's).",
    )(f)
    f = click.option("--context", metavar="NAME", help="Kubeconfig context to use.")(f)
    f = click.option(
        "--kubeconfig", metavar="PATH", envvar="KUBECONFIG",
        help="Kubeconfig file (default: $KUBECONFIG, else ~/.kube/config).",
    )(f)
    return f


def job_file_argument(f):
    return click.argument("file", type=click.Path(dir_okay=False, path_type=str))(f)


backend_option = click.option(
    "--backend",
    type=click.Choice(["indexed-job", "pytorchjob"]),
    help="Override spec.backend.",
)

output_option = click.option(
    "-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
    help="Output format.",
)
