"""Writing to the cluster: a submission's objects created all or nothing and undone
(``creating``), what kdist may delete and what a submission made (``owned``), and a name
another object holds, named with its owner (``taken``)."""
