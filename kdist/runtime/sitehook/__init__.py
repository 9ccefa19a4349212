"""A directory for the workers' ``PYTHONPATH`` holding only kdist's ``sitecustomize``.

A package only so that it ships with kdist; nothing imports it as
``kdist.runtime.sitehook`` (``kdist.runtime.worker_exec`` puts the directory
first on ``PYTHONPATH``, and Python's ``site`` imports ``sitecustomize`` from it).
"""
