"""A resource kdist touches: where it lives in the API (`kdist.kube.kinds` lists them).

Every URL kdist requests is built here. `Kind.item` refuses a name or
namespace that is not one, so no code path can turn an empty or odd name into
a collection URL (``DELETE .../jobs/`` deletes every Job in a namespace).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from kdist.shared.errors import UsageError
from kdist.shared.names import namespace_problem, object_name_problem


@dataclass(frozen=True)
class Kind:
    kind: str
    api_version: str  # "v1" (core) or "group/version"
    plural: str
    ref: str  # as kubectl names it: job.batch, service, ...

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def _root(self) -> str:
        return f"/apis/{self.api_version}" if "/" in self.api_version else \
            f"/api/{self.api_version}"

    def collection(self, namespace: str | None) -> str:
        """The list/watch/create URL, in `namespace` or (None) in every namespace."""
        if namespace is None:
            return f"{self._root()}/{self.plural}"
        return f"{self._root()}/namespaces/{_checked_namespace(namespace)}/{self.plural}"

    def item(self, namespace: str, name: str, subresource: str = "") -> str:
        """One object's URL; refuses anything that is not a valid name."""
        problem = object_name_problem(name)
        if problem:
            raise UsageError(f"{self.plural}: {problem}")
        url = f"{self.collection(namespace)}/{quote(name, safe='')}"
        return f"{url}/{subresource}" if subresource else url

    def cluster_item(self, name: str) -> str:
        """A cluster-scoped object's URL (no namespace); refuses anything not a valid name."""
        problem = object_name_problem(name)
        if problem:
            raise UsageError(f"{self.plural}: {problem}")
        return f"{self.collection(None)}/{quote(name, safe='')}"

    def discovery(self) -> str:
        return self._root()


def _checked_namespace(namespace: str) -> str:
    problem = namespace_problem(namespace)
    if problem:
        raise UsageError(problem)
    return namespace
