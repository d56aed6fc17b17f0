"""``-k EXPR``: pytest's keyword expressions over a trial's id and scenario."""

from __future__ import annotations

import pytest

from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.suite.keywords import matcher

TRIALS = [("enospc", "enospc"), ("enospc-late", "enospc"), ("kill9-mid-save-r01", "kill9-mid-save"),
          ("kill9-mid-save-r02", "kill9-mid-save"), ("first-save", "power-loss")]


def chosen(expr: str):
    match = matcher(expr)
    return [ident for ident, scenario in TRIALS if match((ident, scenario))]


@pytest.mark.parametrize("expr, ids", [
    ("enospc and not late", ["enospc"]),
    ("ENOSPC", ["enospc", "enospc-late"]),
    ("power", ["first-save"]),
    ("save and not (r02 or power)", ["kill9-mid-save-r01"]),
    ("not not r02", ["kill9-mid-save-r02"]),
    ("late or r01 and kill9", ["enospc-late", "kill9-mid-save-r01"]),
    ("(late or r01) and kill9", ["kill9-mid-save-r01"]),
    ("", [ident for ident, _ in TRIALS]),
    ("nothing", []),
])
def test_expressions_select_as_pytest_does(expr, ids):
    assert chosen(expr) == ids


@pytest.mark.parametrize("expr, message", [
    ("and late", "unexpected and at column 1"),
    ("late or", "the expression ends too early at column 8"),
    ("(late", "the expression ends too early at column 6"),
    ("late)", "unexpected ) at column 5"),
    ("late r01", "unexpected r01 at column 6"),
    ("late $", "unexpected character at column 6"),
])
def test_malformed_expressions_are_one_line_errors_with_the_column(expr, message):
    with pytest.raises(UsageError) as info:
        matcher(expr)
    assert message in str(info.value) and "\n" not in str(info.value)
