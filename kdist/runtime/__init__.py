"""The launcher's pieces (``python -m kdist.launch``), and what a worker gets from kdist.

Runtime side: standard library, torch and ``kdist.shared`` only (an
import-linter contract), since it runs in the training image.

- ``plan``: the pod's environment -> a ``LaunchPlan``; the bounded wait for the master.
- ``restarts``: which whole-job restart this is, on every backend.
- ``store``: torch's TCPStore wire protocol (client and a small server), without torch.
- ``rendezvous``: the launchers' static rendezvous and exit barrier on the master port.
- ``workers``: each worker's environment (torchrun's), starting and stopping them.
- ``agent``: runs the node's workers (no torch in the launcher); the exit code.
- ``worker_exec``: what each worker gets before its command (and a wrapper for other launchers).
- ``output``: follows the workers' output (whole lines, progress bars collapsed).
- ``watchdog``: ``progressTimeoutSeconds``: a job that prints nothing ends as a hang.
- ``heartbeat``: ``nodeLossSeconds``: a node whose launcher falls silent is lost, in seconds.
- ``membership``, ``spares``: ``spares``: a warm spare takes a lost node's rank; the node,
  back, is fenced.
- ``elastic``: ``spec.minNodes``: the survivors of a lost node go on at a smaller size.
- ``failures``: which failure names the node's, and a lost peer told from a code error.
- ``preemption``: SIGTERM -> every rank agrees to stop at the same step.
- ``launch``: the launcher itself (argv, then the order of things): ``python -m kdist.launch``.
- ``workdir``: a shipped workdir reassembled, checked and unpacked before the workers start.
- ``standby``, ``warmstart``: a worker per local rank that imported torch ahead (warm
  workers, and a first start that may be warm unasked).
- ``sitehook``: a ``sitecustomize``: ``collectiveTimeoutSeconds`` as torch's default; rank 0
  serves the store.
"""
