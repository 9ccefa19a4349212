"""`kdist check`: before the first submit, one line per thing a submit needs (as `sky check`).

The verdicts come from `kdist.Client.check` (`kdist.kube.probe.check`); this module
only prints them: aligned lines with the fix after each failure, or `-o json`, a
list of {check, status, detail, fix} for scripts. Exit 0 when no required check
failed, 1 when one did; an optional feature that is absent is "not served".
"""

from __future__ import annotations

import json
import sys

import click

from kdist.cli.options import ClusterOptions, Command, cluster_options
from kdist.cli.say import say

_MARK = {"ok": "ok", "fail": "FAIL", "not served": "--", "unknown": "??", "skipped": ".."}


@click.command(cls=Command, examples=[
    "kdist check                      # the kubeconfig's current context and namespace",
    "kdist check -n team-a --context prod",
    "kdist check -o json | jq -r '.[] | select(.status == \"fail\") | .fix'"])
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="Output format (json: a list, one object per check).")
@cluster_options
def check(opts: ClusterOptions, output: str) -> None:
    """Check that this kubeconfig, cluster and namespace are ready for kdist.

    One line each: the kubeconfig and context; the connection (refused, no such
    host, TLS, timeout); the credentials; the namespace (exists, readable);
    whether you may do what kdist does there (a SelfSubjectAccessReview per verb
    of manifests/rbac.yaml's Role); which optional backends and features the
    cluster serves (PyTorchJob, JobSet, Kueue and its LocalQueues, PodGroups for
    gang scheduling, container restart rules). A failing line says the fix. Exit 0
    when every required check passes, 1 when one fails; what is optional and absent
    is "not served".
    """
    from kdist.api import Client

    verdicts = Client(kubeconfig=opts.kubeconfig, context=opts.context,
                      namespace=opts.namespace, request_timeout=opts.request_timeout).check()
    failed = [v for v in verdicts if v.failed]
    if output == "json":
        click.echo(json.dumps([v.as_dict() for v in verdicts], indent=2))
    else:
        width = max(len(v.check) for v in verdicts)
        for v in verdicts:
            # Cluster words (a server's message, a queue's name) are escaped by say().
            say(f"{_MARK.get(v.status, v.status):<4} {v.check:<{width}}  {v.detail}")
            if v.fix:
                say(f"{'':<4} {'':<{width}}  fix: {v.fix}")
        say(f"{len(failed)} required check(s) failed" if failed else
            "ready: every required check passed", err=bool(failed))
    sys.exit(1 if failed else 0)
