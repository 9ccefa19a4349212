"""The cluster side: kubeconfig, the API client, reading API objects, following jobs.

- ``config``: the kubeconfig, read once and bounded; namespaces resolved.
- ``kinds``: one descriptor per resource; every URL is built there.
- ``client``: `Cluster`, raw JSON requests with errors mapped (``errors``); ``creating``
  its all-or-nothing submissions, ``owned`` what it may delete.
- ``transport``: one request on the wire: ``deadline`` ends it in time, ``bodies``
  reads its answer in bounded pieces, ``throttle`` says when to send it again.
- ``objects``: pure readers of API objects (ranks, phases, log records).
- ``tracker``: the state machine that follows one job.
- ``sources`` + ``reflector``: list/watch loops and log followers.

Layers (docs/DESIGN.md): imports ``kdist.spec`` and ``kdist.shared``.
"""
