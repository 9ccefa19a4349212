"""kdist's YAML reads back identically with kubectl's reader and with PyYAML.

kubectl reads manifests with sigs.k8s.io/yaml on go-yaml v2 (YAML 1.1 rules of
its own: `y`, `0o17`, `1_000`, `1e3` are not strings there). tests/tools/k8syaml
is that reader, built from the same Go modules kubectl uses; every comparison
here is against the JSON it prints, which is what kubectl would send.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdist.rendering.yamlout import dump_objects, go_yaml_resolves

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "tests" / "tools" / "k8syaml" / "build.sh"
GOLDEN = sorted((ROOT / "tests" / "unit" / "golden").glob("*.yaml"))
_SPACE = re.compile(r"\s*")
# PyYAML's pure-Python reader and libyaml's (kdist reads with the latter when present).
LOADERS = [yaml.SafeLoader, *([yaml.CSafeLoader] if hasattr(yaml, "CSafeLoader") else [])]

# Strings some YAML reader takes for something else, or that need escaping.
HOSTILE = [
    # go-yaml v2 / YAML 1.1 booleans and nulls
    *"y Y yes Yes YES n N no No NO true True TRUE false False FALSE".split(),
    *"on On ON off Off OFF ~ null Null NULL".split(), "",
    # numbers in every form YAML 1.1, 1.2 or Go's strconv accepts
    "0", "-0", "+0", "1", "+1", "-1", "010", "08", "0o17", "0O17", "-0o17", "0x1F", "0X1f",
    "-0x1F", "0x_1F", "0b101", "0B101", "-0b101", "+0b1", "1_000", "1__0", "1_", "+1_0",
    "1:30", "-1:30:00", "190:20:30", "1.10", "1.", "+1.", ".5", "-.5", "+.5", "._5", "1e3",
    "1E3", "1e+3", "1.5e-3", "-1e3", "1_0.5", "6.8523015e+5", "685.230_15e+03",
    ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "-.inf", "-.INF", "nan", "inf",
    "NaN", "Infinity", "-Infinity", "0x1p-2", "1e999", "9223372036854775807",
    "9223372036854775808", "18446744073709551616", "-9223372036854775809",
    "99999999999999999999999", "0xFFFFFFFFFFFFFFFFFFFF",
    # timestamps, merge and value keys
    "2001-12-14", "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10 -5",
    "2001-1-2", "2001-12-14T21:59:43Z", "<<", "=", "!", "&", "*",
    # indicators, comments, tags, anchors, directives
    "- x", "-", "--", "---", "--- x", "...", "? x", "?", ":", ": x", "key: value", "a:b",
    "a :b", "#x", "a #b", "a#b", "!tag", "!!str", "!!binary", "&a", "*a", "|", "|-", ">",
    ">-", "%", "%YAML 1.1", "@", "`", "'", '"', "''", '""', "{}", "[]", "{a: b}", "[a]",
    ",", "a, b", "\\", "\\n", "@x", "`x`", "a: ", "a:", "|x", ">x",
    # spaces and line breaks
    " ", "  ", " x", "x ", "\t", "x\t", "\tx", "a\tb", "\n", "a\n", "\na", "a\nb", "a\n\nb",
    "a\r\nb", "\r", "a\x85b", "\x85", "a\u2028b", "\u2028", "a\u2029b", "\u2029",
    "a\n---\nb", "a\n--- x\nb", "a\n...\nb", "a\n# c\nb", "a\n  b", "x\n-y",
    # control characters (no NUL: kdist refuses it), DEL, C1, BOM, non-characters
    *(chr(c) + "x" for c in range(1, 32)), "\x7f", "a\x7fb", "\x80", "a\x9fb", "\ufeff",
    "a\ufeffb", "\ufffe", "\uffff", "\xa0", "a\xa0", "\xa0a",
    # other unicode
    "é", "日本語", "\U0001f600", "a\U0001f600b", "\u200b", "\u202e", "ǅ", "ﬃ",
    # plain strings kdist renders every day
    "2Gi", "500m", "--max-steps", "kdist.workloads.ddp", "/checkpoints",
    "registry.example/kdist-train:0.1.0", "1.2.3", "v1", "nvidia.com/gpu", "$(RANK)",
]
# Very long strings, with and without spaces: never folded onto a second line.
LONG = ["x" * 70_000, ("word " * 20_000).strip(), "a " * 40_000, "y " * 5 + "z", "1" * 400]


def objects_with(s: str) -> list[dict[str, Any]]:
    """A Job and a Service carrying `s` in every kind of position kdist renders:
    names, label/annotation/nodeSelector keys and values, image, command and
    args items, env values, paths, and a top-level field."""
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": s,
                "namespace": s,
                "labels": {s: s, "app.kubernetes.io/name": s},
                "annotations": {s: s},
            },
            "spec": {
                "completions": 2,
                "podFailurePolicy": {"rules": [{"onExitCodes": {"values": [3, 4]}}]},
                "template": {
                    "spec": {
                        "nodeSelector": {s: s},
                        "tolerations": [{"key": s, "operator": "Equal", "value": s}],
                        "containers": [
                            {
                                "name": s,
                                "image": s,
                                "command": [s, "-m", s],
                                "args": [s, "--flag", s],
                                "env": [{"name": s, "value": s}],
                                "resources": {"limits": {"cpu": s, s: "1"}},
                                "volumeMounts": [{"name": "checkpoint", "mountPath": s}],
                            }
                        ],
                    }
                },
            },
            s: s,
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": s}, "spec": {s: [s]}},
    ]


def as_json(objects: list[dict[str, Any]]) -> list[Any]:
    return json.loads(json.dumps(objects))


class KubectlReader:
    """One long-lived k8syaml process: a YAML stream in, kubectl's JSON out."""

    def __init__(self, binary: str) -> None:
        self.proc = subprocess.Popen(
            [binary, "-0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )

    def read(self, text: str) -> list[Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(text.encode() + b"\0")
        answer = json.loads(self.proc.stdout.readline())
        assert "error" not in answer, f"kubectl's reader refused kdist's YAML: {answer['error']}"
        return answer["docs"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def kubectl_reader() -> Iterator[KubectlReader]:
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain (go) on PATH to build kubectl's YAML reader")
    built = subprocess.run(
        ["bash", str(BUILD)], capture_output=True, text=True, timeout=900, env=os.environ
    )
    assert built.returncode == 0, f"building tests/tools/k8syaml failed:\n{built.stderr}"
    reader = KubectlReader(built.stdout.strip())
    yield reader
    reader.close()


def assert_reads_back(reader: KubectlReader, objects: list[dict[str, Any]]) -> None:
    text = dump_objects(objects)
    for loader in LOADERS:
        assert list(yaml.load_all(text, Loader=loader)) == objects, f"{loader.__name__} differs"
    assert reader.read(text) == as_json(objects), "kubectl reads it back differently"


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda p: p.name)
def test_golden_files_are_reproduced_and_read_back_by_kubectl(kubectl_reader, golden):
    text = golden.read_text()
    objects = list(yaml.safe_load_all(text))
    assert dump_objects(objects) == text
    assert kubectl_reader.read(text) == as_json(objects)


def test_hostile_strings_read_back_identically_everywhere(kubectl_reader):
    wrong = []
    for s in HOSTILE:
        try:
            assert_reads_back(kubectl_reader, objects_with(s))
        except AssertionError as e:
            wrong.append(f"{s!r}: {str(e).splitlines()[0]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("s", LONG, ids=lambda s: f"{s[:6]!r}x{len(s)}")
def test_long_strings_read_back_identically(kubectl_reader, s):
    # Two positions only: at top level (indent 0, where a folded line could start
    # with `---`) and nested; the other positions add nothing but time.
    assert_reads_back(kubectl_reader, [{"kind": s, "metadata": {"labels": {s: [s]}}}])


def test_strings_go_yaml_reads_as_other_types_are_quoted():
    # Without Go: the strings kubectl's reader would turn into bools, numbers or null.
    for s in ["y", "N", "on", "0o17", "1_000", "1e3", "+1", ".5", "-.inf", "0b101", "<<", ""]:
        assert go_yaml_resolves(s), s
        assert dump_objects([{"k": s}]) == f"---\nk: '{s}'\n"


def test_plain_strings_stay_plain():
    # Byte-identity with what PyYAML printed before: no gratuitous quotes.
    for s in ["2Gi", "500m", "--max-steps", "kdist.workloads.ddp", "/checkpoints", "1.2.3",
              "registry.example/kdist-train:0.1.0", "v1", "yes-no", "n1", "0a", "a:b",
              "2001-12-14x", "1e", "0x", "+", ".", "..5", "noon", "Yess", "é"]:
        assert not go_yaml_resolves(s), s
        assert dump_objects([{"k": s}]) == f"---\nk: {s}\n"


def test_line_breaks_and_controls_stay_on_one_line():
    for s in ["a\nb", "a\x85b", "a\u2028b", "a\tb", "a\x1bb", "x\n---\ny", ("w " * 40_000)]:
        text = dump_objects([{"k": [s]}])
        assert text.count("\n") == 3, repr(text[:80])


def kubectl_binary() -> str | None:
    """The test cluster's kubectl (tests/cluster/build.sh) if built, else one on PATH."""
    cache = Path(os.environ.get("KDIST_CACHE", Path.home() / ".cache" / "kdist"))
    built = sorted(cache.glob("bin/kubernetes-*/kubectl"))
    return str(built[-1]) if built else shutil.which("kubectl")


def json_objects(text: str) -> list[Any]:
    """JSON values written back to back (how kubectl prints several objects)."""
    decoder, at, values = json.JSONDecoder(), 0, []
    while (at := _SPACE.match(text, at).end()) < len(text):
        value, at = decoder.raw_decode(text, at)
        values.append(value)
    return values


def test_kubectl_itself_reads_the_same():
    """kubectl proper, offline: `label --local` decodes every document the way
    `apply -f` does and prints it back (plus the label it was asked to add)."""
    kubectl = kubectl_binary()
    if kubectl is None:
        pytest.skip("no kubectl binary (build one with tests/cluster/build.sh kubernetes)")
    objects = [o for g in GOLDEN for o in yaml.safe_load_all(g.read_text())]
    objects += [o for s in HOSTILE for o in objects_with(s)]
    probe = "kdist.test/probe"
    done = subprocess.run(
        [kubectl, "label", "--local", "-f", "-", "-o", "json", f"{probe}=x"],
        input=dump_objects(objects).encode(), capture_output=True, timeout=120,
        env={**os.environ, "KUBECONFIG": os.devnull},
    )
    assert done.returncode == 0, done.stderr.decode()
    got = json_objects(done.stdout.decode())
    for obj in got:
        del obj["metadata"]["labels"][probe]
    want = as_json(objects)
    for obj in want:
        obj["metadata"].setdefault("labels", {})
        if obj["metadata"].get("namespace") == "":
            del obj["metadata"]["namespace"]  # kubectl drops an empty namespace
    assert len(got) == len(want)
    wrong = [json.dumps(w)[:200] for g, w in zip(got, want, strict=True) if g != w]
    assert not wrong, "\n".join(wrong)


YAML_SPECIAL = st.text(
    alphabet="yYnNoOtTfF01789_.:+-eExXbB #&*!|>'\"%@`{}[],?~<=\\\t\n\r\x85\u2028\u2029\ufeff\xa0",
    max_size=12,
)
NUMBERISH = st.from_regex(r"[-+]?(0[xob])?[0-9a-fA-F_]{0,6}(\.[0-9_]*)?([eE][-+]?[0-9]{1,3})?",
                          fullmatch=True)
ANY_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
                   max_size=40)
STRINGS = st.one_of(ANY_TEXT, YAML_SPECIAL, NUMBERISH, st.sampled_from(HOSTILE))
VALUES = st.recursive(
    st.one_of(STRINGS, st.integers(-(2**63), 2**63 - 1), st.booleans(), st.none()),
    lambda kids: st.one_of(st.lists(kids, max_size=4),
                           st.dictionaries(STRINGS, kids, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(s=STRINGS, extra=st.dictionaries(STRINGS, VALUES, max_size=3))
def test_any_text_reads_back_identically_everywhere(kubectl_reader, s, extra):
    objects = objects_with(s)
    objects[0]["spec"]["extra"] = extra
    assert_reads_back(kubectl_reader, objects)
