"""The cluster side: kubeconfig, the API client, reading API objects, following jobs.

- ``client``: `Cluster`, raw JSON requests with errors mapped (``errors``).
- ``kinds``: one descriptor per resource; every URL is built there.
- ``connect/``: where to talk to and how: the kubeconfig (``config``), trust, proxies,
  exec credentials, one request on the wire (``transport``, ``deadline``, ``bodies``,
  ``throttle``) and the pieces of the official client kdist loads (``official``).
- ``watch/``: reading: checked answers, pure readers of API objects (``objects``), the
  state machine that follows one job (``tracker``), list/watch loops and log followers
  (``sources`` + ``reflector``), many jobs over one watch (``jobswatch``).
- ``write/``: a submission's all-or-nothing creates (``creating``), what kdist may delete
  (``owned``), a name another object holds (``taken``).
- ``probe/``: what the cluster serves: `kdist check` (``check``, ``features``,
  ``verdict``) and whether pods restart in place (``restarts``).

Layers (docs/DESIGN.md): imports ``kdist.spec`` and ``kdist.shared``.
"""
