"""`kdist list`: kdist's jobs as a table, or as kubectl's `-o json|yaml|name|wide` give them.

json: a list, one object per job (as `check -o json`); yaml: one document per job;
name: one job name a line (for `xargs kdist delete`); wide: the table with the job's
kind and creation time, and its namespace always.
"""

from __future__ import annotations

import json

import click

from kdist.cli.cluster_verbs import _opts, _selector
from kdist.cli.options import ClusterOptions, Command, cluster_options
from kdist.shared.errors import UsageError

FORMATS = ["table", "wide", "json", "yaml", "name"]


@click.command("list", cls=Command, examples=[
    "kdist list",
    "kdist list -A -o wide",
    "kdist list -l team=vision             # as kubectl get -l: =, !=, in (...), !key",
    "kdist list -o name -l sweep=lr | xargs -n1 kdist delete",
    "kdist list -o json | jq -r '.[] | select(.phase == \"Failed\") | .name'",
    "kdist list --watch -l 'team in (a,b)'"])
@click.option("-A", "--all-namespaces", is_flag=True, help="Jobs in every namespace.")
@click.option("-w", "--watch", is_flag=True,
              help="A live table (phase, ranks running, step/max, loss, samples/s, ETA) "
                   "until Ctrl-C; one watcher for all jobs.")
@click.option("-l", "--selector", default="", metavar="SELECTOR", callback=_selector,
              help="Only jobs with these labels, as kubectl get -l: key=value, key!=value, "
                   "key in (a,b), key notin (a,b), key, !key; joined by commas (all must hold).")
@click.option("-o", "--output", type=click.Choice(FORMATS), default="table", show_default=True,
              help="json: a list, one object per job; yaml: one document per job; name: "
                   "one name a line; wide: the table with kind, creation time and namespace.")
@cluster_options
def list_(opts: ClusterOptions, all_namespaces: bool, watch: bool, selector: str,
          output: str) -> None:
    """List kdist jobs of every backend (Indexed Jobs, JobSets, PyTorchJobs)."""
    from kdist import api

    if watch:
        if output != "table":
            raise UsageError("--watch draws the live table: -o does not apply to it")
        _watch(opts, all_namespaces, selector)
        return
    rows = api.list_jobs(all_namespaces=all_namespaces, selector=selector, **_opts(opts))
    if output == "json":
        click.echo(json.dumps([row.to_dict() for row in rows], indent=2))
    elif output == "yaml":
        if rows:
            click.echo(api.to_yaml([row.to_dict() for row in rows]), nl=False)
    elif output == "name":
        for row in rows:
            click.echo(row.name)
    else:
        from kdist.cli.progress import print_jobs

        print_jobs(rows, all_namespaces, selector, wide=output == "wide")


def _watch(opts: ClusterOptions, all_namespaces: bool, selector: str) -> None:
    from kdist import api
    from kdist.cli.jobs_table import JobsTable
    from kdist.shared.signals import interruptible

    table = JobsTable(namespaces=all_namespaces)
    with interruptible():
        try:
            api.watch_jobs(all_namespaces=all_namespaces, selector=selector,
                           on_update=table.update, **_opts(opts))
        except KeyboardInterrupt:
            pass
        finally:
            table.stop()
