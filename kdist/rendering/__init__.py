"""Spec -> Kubernetes objects, a pure function (docs/DESIGN.md, "Rendering").

    objects = render(job)        # list of dicts, no cluster, no torch
    text = to_yaml(objects)      # what `kdist render` prints

Layers: imports ``kdist.spec`` and ``kdist.shared`` only. Named
``rendering`` (not ``render``) so that ``kdist.render`` stays the function.
"""

from kdist.rendering.render import render, to_json, to_yaml, with_backend

__all__ = ["render", "to_json", "to_yaml", "with_backend"]
