"""Reading the cluster and following jobs: answers checked where they enter (``answers``),
pure readers of API objects (``objects``), list/watch loops and log followers (``sources`` +
``reflector``), the state machine that follows one job (``tracker``, its ``state``), many
jobs over one watch (``jobswatch``), and the goodput ledger the watch keeps (``ledger``)."""
