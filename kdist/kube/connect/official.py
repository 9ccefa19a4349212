"""The pieces of the official `kubernetes` package that kdist uses, without the rest of it.

kdist speaks raw JSON, so it needs the package for three things only: its
`Configuration`, the kubeconfig and in-cluster loaders (`kubernetes.config`:
TLS, tokens, exec and auth-provider plugins) and the urllib3 pool that
`kubernetes.client.rest` builds from them. Importing any of those normally
runs `kubernetes/__init__.py` first, which imports every subpackage (the
dynamic client pulls in jsonschema, older releases every generated model),
and the kubeconfig loader imports `requests` through `requests_oauthlib` for
the one auth provider (OIDC) that refreshes tokens itself: together most of
`kdist submit`'s start-up (bench/README.md, "The CLI").

So the packages on the way are registered without running their `__init__`
(`_defer`). A deferred package is still the real one: the first name asked of
it that it does not have yet runs its own `__init__` in place, so code in the
same process that does `import kubernetes; kubernetes.watch.Watch(...)` gets
the whole package, as it would have without kdist. The two classes the loader
imports by name but only calls to refresh an OIDC token (`ApiClient`,
`OAuth2Session`) are bound in the loader's module to functions that import
the real class on that first call.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

# Parents first: each one's spec is found through the one before it.
_DEFERRED = ("kubernetes", "kubernetes.client", "kubernetes.client.models", "kubernetes.utils",
             "oauthlib", "oauthlib.oauth2", "requests_oauthlib")
# (package, name): what kubernetes.config.kube_config imports by name and calls only on an
# OIDC token refresh (or to build a typed client, which kdist never does).
_CALLED_LATER = (("kubernetes.client", "ApiClient"), ("requests_oauthlib", "OAuth2Session"))
_load_lock = threading.Lock()
_pieces: tuple[type, ModuleType, ModuleType] | None = None


def pieces() -> tuple[type, ModuleType, ModuleType]:
    """(`Configuration`, the `kubernetes.config` package, `kubernetes.client.rest`)."""
    global _pieces
    with _load_lock:
        if _pieces is None:
            _pieces = _load()
        return _pieces


def _load() -> tuple[type, ModuleType, ModuleType]:
    deferred = set()
    for name in _DEFERRED:
        try:
            if _defer(name):
                deferred.add(name)
        except (ImportError, ValueError):
            pass  # not importable as expected: the plain import below says what is wrong
    # Leaf modules by full name: `from kubernetes.client import rest` would ask the
    # deferred package for `rest` and so run its __init__.
    configuration = importlib.import_module("kubernetes.client.configuration")
    rest = importlib.import_module("kubernetes.client.rest")
    placed: list[tuple[ModuleType, str, Any]] = []
    client = sys.modules["kubernetes.client"]
    if "kubernetes.client" in deferred and "Configuration" not in client.__dict__:
        client.__dict__["Configuration"] = configuration.Configuration  # what the real one binds
    for package, name in _CALLED_LATER:
        if package in deferred and name not in sys.modules[package].__dict__:
            stand_in = _on_first_call(package, name)
            sys.modules[package].__dict__[name] = stand_in
            placed.append((sys.modules[package], name, stand_in))
    try:
        config = importlib.import_module("kubernetes.config")
    finally:
        # The packages themselves keep answering with the real classes.
        for package_module, name, stand_in in placed:
            if package_module.__dict__.get(name) is stand_in:
                del package_module.__dict__[name]
    return configuration.Configuration, config, rest


def _defer(name: str) -> bool:
    """Register package `name` with its `__init__` not run yet; False if already imported
    or not a package."""
    if name in sys.modules:
        return False
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return False
    module = importlib.util.module_from_spec(spec)
    loader, lock = spec.loader, threading.RLock()

    def complete() -> None:
        with lock:  # another thread may have completed it while this one waited
            if module.__dict__.get("__getattr__") is __getattr__:
                del module.__dict__["__getattr__"], module.__dict__["__dir__"]
                loader.exec_module(module)

    def __getattr__(attr: str) -> Any:
        complete()
        return getattr(module, attr)

    def __dir__() -> list[str]:
        complete()
        return dir(module)

    module.__dict__.update(__getattr__=__getattr__, __dir__=__dir__)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return True


def _on_first_call(package: str, name: str) -> Callable[..., Any]:
    def construct(*args: Any, **kwargs: Any) -> Any:
        # By then the stand-in is gone from the package: this is the real class.
        return getattr(importlib.import_module(package), name)(*args, **kwargs)

    construct.__name__ = construct.__qualname__ = name
    return construct
