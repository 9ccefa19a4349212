"""kdist's Python API: what the CLI does, as a client and functions (docs/DESIGN.md, "Python API").

    import kdist
    client = kdist.Client(namespace="team-a")       # the target, once; one connection
    sub = client.submit("job.yaml", wait=False)     # create; returns what was sent
    for rank, line in client.logs(sub.name, follow=True, tail=10):
        print(rank, line)
    state = client.wait(sub.name)                   # follow to the end; JobFailed if it failed
    print(client.metrics(sub.name)[0][-1].loss)
    value = client.train(fn, nodes=2)               # a function on every rank: rank 0's result
    client.delete(sub.name)

The module-level functions (`kdist.submit`, `kdist.status`, ...) are shortcuts
over a default client: they take the target as keywords (``kubeconfig=``,
``context=``, ``namespace=``, ``request_timeout=``). Every argument is
checked before any request, and the typed errors of ``kdist.shared.errors``
(``UsageError``, ``JobNotFound``, ``ClusterError``, ``JobFailed``,
``TimedOut``) are raised. Results are plain dataclasses.

The CLI imports this package and ``kdist.shared`` only (an import-linter
contract): everything it needs of the layers below is here.

Each name is imported on first use (`kdist render` and `validate` load job files and
the renderer, never the cluster client): the submodule it comes from is imported
then, as `kdist` itself does.
"""

import importlib as _importlib
import typing as _typing

#: Where each exported name lives (a test holds the names equal to __all__).
_WHERE = {
    **dict.fromkeys((
        "Client",
    ), "kdist.api.clients"),
    **dict.fromkeys((
        "Validated", "load_file", "pack_code", "pod_security", "render_objects", "run_local",
        "security_note", "to_json", "to_yaml", "validate_file",
    ), "kdist.api.files"),
    **dict.fromkeys((
        "DELETE_TIMEOUT", "follow", "timeout_line", "with_namespace",
    ), "kdist.api.jobs"),
    **dict.fromkeys((
        "check", "client", "delete", "list_jobs", "load", "logs", "metrics", "namespace", "plot",
        "rank_logs", "status", "submit", "train", "validate", "wait", "wait_many", "watch_jobs",
    ), "kdist.api.shortcuts"),
    **dict.fromkeys((
        "ClusterOptions", "Connection", "Deleted", "JobSummary", "Observer", "Quiet", "RankLog",
        "Submission", "check_name", "connect", "reattach_hint", "target",
    ), "kdist.api.types"),
}
__all__ = [
    "Client", "ClusterOptions", "Connection", "DELETE_TIMEOUT", "Deleted", "JobSummary", "Observer",
    "Quiet", "RankLog", "Submission", "Validated", "check", "check_name", "client", "connect",
    "delete", "follow", "list_jobs", "load", "load_file", "logs", "metrics", "namespace",
    "pack_code", "plot", "pod_security", "rank_logs", "reattach_hint", "render_objects",
    "run_local", "security_note", "status", "submit", "target", "timeout_line", "to_json",
    "to_yaml", "train", "validate", "validate_file", "wait", "wait_many", "watch_jobs",
    "with_namespace",
]

if _typing.TYPE_CHECKING:
    from kdist.api.clients import (
        Client,
    )
    from kdist.api.files import (
        Validated,
        load_file,
        pack_code,
        pod_security,
        render_objects,
        run_local,
        security_note,
        to_json,
        to_yaml,
        validate_file,
    )
    from kdist.api.jobs import (
        DELETE_TIMEOUT,
        follow,
        timeout_line,
        with_namespace,
    )
    from kdist.api.shortcuts import (
        check,
        client,
        delete,
        list_jobs,
        load,
        logs,
        metrics,
        namespace,
        plot,
        rank_logs,
        status,
        submit,
        train,
        validate,
        wait,
        wait_many,
        watch_jobs,
    )
    from kdist.api.types import (
        ClusterOptions,
        Connection,
        Deleted,
        JobSummary,
        Observer,
        Quiet,
        RankLog,
        Submission,
        check_name,
        connect,
        reattach_hint,
        target,
    )


def __getattr__(name: str) -> _typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'kdist.api' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # the function `client`, not a submodule of that name
    return value


def __dir__() -> list[str]:
    return sorted({n for n in globals() if not n.startswith("_")} | set(_WHERE))
