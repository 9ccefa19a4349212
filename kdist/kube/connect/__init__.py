"""Talking to the API server: where (``config``: the kubeconfig or in-cluster config, its
``execplugin`` credentials, its ``proxy``), whom it trusts (``trust``), and one request on
the wire (``transport``: ``deadline`` ends it in time, ``bodies`` reads its answer in
bounded pieces, ``throttle`` says when to send it again), over the pieces of the official
client kdist loads (``official``)."""
