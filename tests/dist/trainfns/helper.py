"""A sibling module: shipped with remote.py because it is in the same directory."""


def describe() -> str:
    return "helper from the shipped workdir"
