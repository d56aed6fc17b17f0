"""Markdown sized for a CI job summary: a table of every trial, then the failures with how to replay them.

Whatever the job wrote (its command, its stderr in a headline, the paths it saved to) is text here, never markup:
each such piece is escaped (every character that opens Markdown or HTML inside a line behind a backslash, and a
line's opening mark too) or set in a code span or fenced block longer than any run of backticks in it, so that
it cannot open a heading, link, image, HTML tag, table, list or code fence in the CI summary it is appended to.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import List

from chaosckpt.conductor.errors import printable
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.stored import Results, StoredTrial

ICONS = {"passed": "✅", "failed": "❌", "inconclusive": "⚠️", "skipped": "⏭️", "not-run": "⏸️"}
MAX_DETAILS = 20
"""Failures shown in full; a summary must stay far below CI limits (GitHub's is 1 MiB) and readable."""
MAX_CELL = 160
MAX_POINTS = 40
"""Crash points of a sweep tabled in full; the HTML report has them all."""


_INLINE = re.compile(r"([\\`*_\[\]<>&|~#])")
"""What opens markup inside a line: escapes, code, emphasis, links and images, HTML and autolinks, entities, table
cells, strikethrough, headings' closing marks."""
_OPENING = re.compile(r"^(\s*)(\d+[.)]|[-+=:>.!])")
"""What opens a block at the start of a line: list items (numbered or not), setext underlines, quotes."""
_TICKS = re.compile("`+")


def _text(value: object) -> str:
    """Text within a line as Markdown shows it literally: what could open markup there (:data:`_INLINE`) escaped
    with a backslash."""
    return _INLINE.sub(r"\\\1", str(value))


def _paragraph(value: object) -> str:
    """Text that starts a line, as Markdown shows it literally: :func:`_text`, and a block's opening mark
    (:data:`_OPENING`) escaped too."""
    return _OPENING.sub(lambda m: m.group(1) + m.group(2)[:-1] + "\\" + m.group(2)[-1], _text(value))


def _fence(text: str, least: int = 1) -> str:
    """Backticks enough to open and close a code span or block around ``text``: more than its longest run."""
    return "`" * max([least] + [len(run) + 1 for run in _TICKS.findall(text)])


def _code(value: object) -> str:
    """A code span of ``value``, its fence longer than any backtick run in it (spaced when it starts or ends with
    one, as CommonMark strips one space each side)."""
    text = str(value)
    fence = _fence(text)
    pad = " " if text.startswith("`") or text.endswith("`") or text.startswith(" ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cut(value: object) -> str:
    """A table cell's text, cut at :data:`MAX_CELL` before it is escaped (a cut escape or code span is no cell)."""
    text = str(value).replace("\n", " ")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def _cell_code(value: object) -> str:
    """A table cell holding a code span: its ``|`` escaped too, as GFM splits cells before it reads code spans."""
    return _code(_cut(value)).replace("|", "\\|")


def _value(value) -> str:
    return "–" if value is None else _text(value)


def _about(results: Results) -> str:
    """What the results were run on: the command, when, and by which chaosckpt; for a combined report, its folders."""
    if results.parts:
        return "From " + ", ".join(f"{_code(p.source)} ({p.summary()})" for p in results.parts)
    return (_code(results.command) + (f" · {_text(results.created)}" if results.created else "")
            + f" · chaosckpt {_text(results.version)}")


def _crash_points(stored: StoredTrial) -> List[str]:
    """A sweep's crash-point table under its own heading, with what its resumes found; nothing for other trials."""
    rows = stored.crash_points()
    if not rows:
        return []
    lines = ["", f"### Crash points of {_code(stored.id)}", "", f"{_text(stored.sweep_resumes())}.", "",
             "| after op | operation | on disk | a restarted job |", "|---|---|---|---|"]
    lines += [f"| {_value(r['op'])} | {_cell_code(r['operation'])} | {_text(_cut(r['disk']))} | "
              f"{_text(_cut(r['outcome']))} |" for r in rows[:MAX_POINTS]]
    if len(rows) > MAX_POINTS:
        lines += ["", f"… and {len(rows) - MAX_POINTS} more crash points; see the HTML report."]
    return lines


def render(results: Results) -> str:
    lines: List[str] = [
        f"## {_text(results.title)}: {results.summary()}",
        "",
        _about(results),
        "",
        "| | trial | lost steps | first divergent step | verdict |",
        "|---|---|---|---|---|",
    ]
    for stored in results.trials:
        trial = stored.trial
        verdict = trial.headline if trial else f"skipped: {stored.skipped}" if stored.skipped else "not run"
        lost = _value(trial.lost_steps) if trial else "–"
        divergent = _value(trial.first_divergent_step) if trial else "–"
        lines.append(f"| {ICONS[stored.status]} | {_cell_code(stored.id)} | {lost} | {divergent} | "
                     f"{_text(_cut(verdict))} |")
    for stored in results.trials:
        lines += _crash_points(stored)
    bad = [t for t in results.trials if t.status in ("failed", "inconclusive")]
    if bad:
        lines += ["", "### Failed and inconclusive trials", ""]
    for stored in bad[:MAX_DETAILS]:
        trial = stored.trial
        lines += [f"<details><summary>{ICONS[stored.status]} <code>{html.escape(stored.id)}</code></summary>", "",
                  _paragraph(trial.headline), ""]
        lines += [f"- **{_text(f.kind)}**: {_text(f.message)}" for f in trial.findings]
        if stored.replay:
            fence = _fence(stored.replay, 3)
            lines += ["", "Replay it:", "", f"{fence}sh", stored.replay, fence]
        if stored.smallest:
            fence = _fence(stored.smallest, 3)
            lines += ["", "The smallest fault that fails the same way:", "", f"{fence}sh", stored.smallest, fence]
        lines += ["", "</details>", ""]
    if len(bad) > MAX_DETAILS:
        folders = " ".join(str(p.source) for p in results.sources)
        lines.append(f"… and {len(bad) - MAX_DETAILS} more; see the HTML report or {_code('chaosckpt report ' + folders)}.")
    return "\n".join(printable(line) for line in lines).rstrip() + "\n"


def write(results: Results, path: Path) -> None:
    atomic.write_text(path, render(results))
