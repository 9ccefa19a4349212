"""Label selectors parsed as the API server parses them (apimachinery's labels.Parse)."""

from __future__ import annotations

import pytest

from kdist.kube.watch.jobswatch import job_label_selector
from kdist.shared.errors import UsageError
from kdist.shared.selectors import MAX_SELECTOR, SelectorProblem, check_selector

GOOD = [
    "team=a", "team==a", "team!=a", "team=", "team", "!team", "team in (a,b)",
    "team notin (a)", "team in (a,)", "gen>3", "gen<10", "example.com/team=a",
    " team = a , tier in ( x , y ) , !gone ", "a=b,c!=d,e,!f,g in (h),i>1",
    "app.kubernetes.io/part-of=x", f"k={'v' * 63}",
]

BAD = {
    "a b": "expected an operator",
    "a=b c": "expected ','",
    "a in b": "parenthesised",
    "a in ()": "at least one value",
    "a in (b": "expected ',' or ')'",
    "a in (b c)": "expected ',' or ')'",
    "a>x": "integer",
    "a<-1": "value",
    "=b": "expected a label key",
    "a=b,": "expected a label key",
    ",": "expected a label key",
    "!": "expected a label key",
    "a=(b)": "value",
    "a==b==c": "expected ','",
    "a=b=c": "expected ','",
    "!a=b": "expected ','",
    "key/": "the name must be",
    "/a=b": "prefix",
    "Bad_Prefix/a=b": "prefix",
    "-a=b": "the name must be",
    f"{'k' * 64}=v": "the name must be",
    f"k={'v' * 64}": "value",
    "k=v_": "value",
    "in": "expected a label key",
    "k=v\n": "'\\n' is not allowed",
    "k=\tv": "is not allowed",
    "k=\udcff": "is not allowed",  # a byte that is not UTF-8, as argv decodes it
    "k=é": "is not allowed",
    "k=v\x00": "is not allowed",
}


@pytest.mark.parametrize("text", GOOD)
def test_what_the_api_server_parses_is_accepted(text):
    assert check_selector(text) == text


@pytest.mark.parametrize("text,fragment", BAD.items(), ids=list(map(ascii, BAD)))
def test_what_it_refuses_is_refused_with_a_reason(text, fragment):
    with pytest.raises(SelectorProblem) as e:
        check_selector(text)
    message = str(e.value)
    assert fragment in message, message
    assert message.isprintable() and "\n" not in message, message


def test_a_huge_selector_is_refused():
    with pytest.raises(SelectorProblem, match="at most"):
        check_selector(",".join(["a=b"] * (MAX_SELECTOR // 3)))


def test_the_watch_refuses_a_bad_selector_before_building_a_request():
    with pytest.raises(UsageError, match="expected an operator"):
        job_label_selector("a b")
    assert job_label_selector("team in (a,b)") == \
        "app.kubernetes.io/managed-by=kdist,team in (a,b)"
    assert job_label_selector("") == "app.kubernetes.io/managed-by=kdist"
