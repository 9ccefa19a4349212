"""Label selectors (`-l`) parsed as the API server parses them, before any request.

The grammar is apimachinery's ``labels.Parse``: requirements joined by ``,``,
each ``key``, ``!key``, ``key=v`` / ``key==v`` / ``key!=v`` (v may be empty),
``key in (v1,v2)`` / ``key notin (...)`` (at least one value) or ``key>N`` /
``key<N`` (an integer); keys and values follow the label rules. Unlike the API
server, only printable ASCII is accepted (labels are ASCII; a tab, a newline or
a byte that is not UTF-8 is a typo, never a selector). Standard library only.
"""

from __future__ import annotations

import re

MAX_SELECTOR = 4096  # far beyond any real one; keeps the request URL bounded

_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# apimachinery's lexer: these characters end an identifier.
_TOKEN = re.compile(r" *(==|!=|[=!<>(),]|[^ =!<>(),]+)")
_OPERATORS = {"=", "==", "!=", "<", ">", "in", "notin"}


class SelectorProblem(ValueError):
    """Why a selector is not one; the message names the part at fault."""


def check_selector(text: str) -> str:
    """`text` when the API server would parse it as a label selector; SelectorProblem
    otherwise. "" (select everything) is returned as it is."""
    if not isinstance(text, str):
        raise SelectorProblem(f"a label selector must be text, not {type(text).__name__}")
    if len(text) > MAX_SELECTOR:
        raise SelectorProblem(f"label selector is {len(text)} characters, at most "
                              f"{MAX_SELECTOR} allowed")
    bad = next((c for c in text if not (" " <= c <= "~")), None)
    if bad is not None:
        raise SelectorProblem(f"label selector {text!r}: {bad!r} is not allowed (printable "
                              "ASCII only)")
    if text.strip():
        _Parser(text).parse()
    return text


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = [m.group(1) for m in _TOKEN.finditer(text)]
        self.i = 0

    def fail(self, why: str) -> SelectorProblem:
        return SelectorProblem(f"label selector {self.text!r}: {why}")

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.i += token is not None
        return token

    def parse(self) -> None:
        while True:
            self.requirement()
            token = self.take()
            if token is None:
                return
            if token != ",":
                raise self.fail(f"expected ',' or the end after a requirement, found {token!r}")

    def requirement(self) -> None:
        token = self.take()
        if token == "!":
            self.key(self.take())
            return
        key = self.key(token)
        op = self.peek()
        if op is None or op == ",":
            return  # `key`: the label exists
        if op not in _OPERATORS:
            raise self.fail(f"after key {key!r}, expected an operator (=, ==, !=, in, notin, "
                            f"<, >), found {op!r}")
        self.take()
        if op in ("in", "notin"):
            values = self.value_set(op)
        else:
            nxt = self.peek()
            values = [""] if nxt is None or nxt == "," else [self.take() or ""]
        for value in values:
            self.value(key, value)
        if op in ("<", ">") and not re.fullmatch(r"[0-9]+", values[0]):
            raise self.fail(f"{key} {op} {values[0]!r}: the value must be an integer")

    def key(self, token: str | None) -> str:
        if token is None or token in _OPERATORS or token in ("!", "(", ")", ","):
            found = "the end" if token is None else repr(token)
            raise self.fail(f"expected a label key, found {found}")
        prefix, slash, name = token.rpartition("/")
        if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
            raise self.fail(f"key {token!r}: the prefix before '/' must be a DNS subdomain")
        if len(name) > 63 or not _LABEL_NAME.fullmatch(name):
            raise self.fail(f"key {token!r}: the name must be 1-63 letters, digits, '-', '_' "
                            "or '.', starting and ending with a letter or digit")
        return token

    def value(self, key: str, value: str) -> None:
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            raise self.fail(f"value {value!r} of {key}: at most 63 letters, digits, '-', '_' "
                            "or '.', starting and ending with a letter or digit")

    def value_set(self, op: str) -> list[str]:
        if self.take() != "(":
            raise self.fail(f"'{op}' needs a parenthesised list of values: {op} (a,b)")
        values: list[str] = []
        while True:
            token = self.peek()
            if token in (",", ")"):
                values.append("")  # `(a,)`: the empty value, as the API server reads it
            elif token is None:
                raise self.fail("')' is missing")
            else:
                values.append(self.take() or "")
            closing = self.take()
            if closing == ")":
                break
            if closing != ",":
                raise self.fail(f"expected ',' or ')' in the values of '{op}', found "
                                f"{'the end' if closing is None else repr(closing)}")
        if values == [""]:
            raise self.fail(f"'{op}' needs at least one value")
        return values
