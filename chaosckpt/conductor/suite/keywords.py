"""``-k EXPR``: pytest's keyword expressions, to pick a suite's trials by id or scenario.

``enospc and not late``, ``kill9 or (power and r1)``: a word matches a trial when it is a
case-insensitive substring of one of the trial's names; ``and``, ``or``, ``not`` and parentheses
combine words as in pytest. Written here because pytest is not a run-time dependency.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, List, NoReturn, Tuple

from chaosckpt.conductor.errors import UsageError, shown

TOKEN = re.compile(r"\s*([()]|[\w:+\-.\[\]\\/=]+)")

Matcher = Callable[[Iterable[str]], bool]


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.tokens: List[Tuple[str, int]] = []
        pos = 0
        while pos < len(expr):
            if expr[pos:].strip() == "":
                break
            match = TOKEN.match(expr, pos)
            if match is None:
                self.fail(len(expr) - len(expr[pos:].lstrip()), "unexpected character")
            self.tokens.append((match.group(1), match.start(1)))
            pos = match.end()
        self.next = 0

    def fail(self, column: int, why: str) -> NoReturn:
        raise UsageError(f"-k {shown(self.expr)}: {why} at column {column + 1}; "
                         "combine words with and, or, not and parentheses, e.g. -k \"enospc and not late\"")

    def peek(self) -> str:
        return self.tokens[self.next][0] if self.next < len(self.tokens) else ""

    def take(self) -> Tuple[str, int]:
        if self.next >= len(self.tokens):
            self.fail(len(self.expr), "the expression ends too early")
        token = self.tokens[self.next]
        self.next += 1
        return token

    def expression(self) -> Matcher:
        terms = [self.conjunction()]
        while self.peek() == "or":
            self.take()
            terms.append(self.conjunction())
        return lambda names: any(t(names) for t in terms)

    def conjunction(self) -> Matcher:
        terms = [self.negation()]
        while self.peek() == "and":
            self.take()
            terms.append(self.negation())
        return lambda names: all(t(names) for t in terms)

    def negation(self) -> Matcher:
        token, column = self.take()
        if token == "not":
            inner = self.negation()
            return lambda names: not inner(names)
        if token == "(":
            inner = self.expression()
            closing, where = self.take()
            if closing != ")":
                self.fail(where, "expected )")
            return inner
        if token in (")", "and", "or"):
            self.fail(column, f"unexpected {token}")
        word = token.lower()
        return lambda names: any(word in n.lower() for n in names)


def matcher(expr: str) -> Matcher:
    """A test of a trial's names against ``expr``; an empty expression matches every trial."""
    parser = _Parser(expr)
    if not parser.tokens:
        return lambda names: True
    matcher = parser.expression()
    if parser.next < len(parser.tokens):
        token, column = parser.tokens[parser.next]
        parser.fail(column, f"unexpected {token}")
    return matcher
