"""``kdist run --local``: a job as local process groups, one per node, on this machine.

`runner` starts and watches the nodes; `state` keeps their state in ``.kdist/<name>``;
`gpus` shares this machine's GPUs out; `ledger` keeps the run's goodput ledger; `stop`
stops the nodes, a save first.
"""

from kdist.local.runner import local_env, run_local, run_nodes

__all__ = ["local_env", "run_local", "run_nodes"]
