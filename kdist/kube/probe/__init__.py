"""Asking the cluster what it serves: `kdist check`'s probes (``check``: kubeconfig,
connection, credentials, namespace, access reviews; ``features``: kinds, Kueue, PodGroups;
``verdict``: one line and its raw request) and whether pods restart in place (``restarts``,
asked by `kdist check` and before a submit)."""
