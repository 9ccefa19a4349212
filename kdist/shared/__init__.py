"""Names every side of kdist shares: env variables, exit codes, label keys, errors.

Standard library only, so the container side (``kdist.launch``, the workloads)
can import it without pulling in the CLI's libraries. docs/DESIGN.md, "Layers".
"""
