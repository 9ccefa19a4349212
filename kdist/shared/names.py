"""Kubernetes name rules kdist checks before anything reaches the API server.

Standard library only: the spec model, the CLI's NAME arguments and the
cluster client share these, so a name that is not a name never becomes a
URL (an empty name would make ``DELETE .../jobs/`` a collection delete).
Every pattern is matched with ``fullmatch``: ``$`` would accept a trailing
newline. Names in messages are shown with `!a` (every character outside
printable ASCII escaped, `'d\\u0435mo'`) and the first such character named
(`not_ascii`): a Cyrillic `е` or a zero-width space in a name looks like no
fault at all when shown as itself.
"""

from __future__ import annotations

import re
import unicodedata

#: Job names: pods are <name>-<index>-<5 chars> and hostnames <= 63.
MAX_JOB_NAME = 50

DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def not_ascii(text: str) -> str:
    """'; U+0435 (CYRILLIC SMALL LETTER IE) is not ASCII' for the first character of `text`
    outside ASCII, to end a message with; '' when there is none."""
    for char in text:
        if not char.isascii():
            name = unicodedata.name(char, "")
            return f"; U+{ord(char):04X}{f' ({name})' if name else ''} is not ASCII"
    return ""


def job_name_problem(name: str, limit: int = MAX_JOB_NAME) -> str | None:
    """Why `name` cannot be a kdist job's name, or None when it can."""
    if not isinstance(name, str) or not name:
        return "a job name must not be empty"
    if len(name) > limit:
        return f"job name {name!a} is {len(name)} characters, at most {limit} allowed"
    if not DNS1035_LABEL.fullmatch(name):
        return (f"job name {name!a} must be a DNS-1035 label: lower-case letters, digits and "
                f"'-', starting with a letter and ending with a letter or digit{not_ascii(name)}")
    return None


def namespace_problem(namespace: str) -> str | None:
    """Why `namespace` cannot be a namespace's name, or None when it can."""
    if not isinstance(namespace, str) or not namespace:
        return "a namespace must not be empty"
    if len(namespace) > 63 or not DNS1123_LABEL.fullmatch(namespace):
        return (f"namespace {namespace!a} must be a DNS-1123 label of at most 63 characters: "
                "lower-case letters, digits and '-', starting and ending with a letter or "
                f"digit{not_ascii(namespace)}")
    return None


def object_name_problem(name: str) -> str | None:
    """Why `name` cannot name a namespaced object (pod, Service, ...) in a URL."""
    if not isinstance(name, str) or not name:
        return "an object name must not be empty"
    if len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        return f"{name!a} is not a valid object name (a DNS-1123 subdomain){not_ascii(name)}"
    return None
