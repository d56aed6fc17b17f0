"""Markdown sized for a CI job summary: a table of every trial, then the failures with how to replay them."""

from __future__ import annotations

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


def _cell(text: str) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def _value(value) -> str:
    return "–" if value is None else str(value)


def _about(results: Results) -> str:
    """What the results were run on: the command, when, and by which chaosckpt; for a combined report, its folders."""
    if results.parts:
        return "From " + ", ".join(f"`{p.source}` ({p.summary()})" for p in results.parts)
    return f"`{results.command}`" + (f" · {results.created}" if results.created else "") + f" · chaosckpt {results.version}"


def _crash_points(stored: StoredTrial) -> List[str]:
    """A sweep's crash-point table under its own heading, with what its resumes found; nothing for other trials."""
    rows = stored.crash_points()
    if not rows:
        return []
    lines = ["", f"### Crash points of `{stored.id}`", "", f"{stored.sweep_resumes()}.", "",
             "| after op | operation | on disk | a restarted job |", "|---|---|---|---|"]
    lines += [f"| {r['op']} | `{_cell(r['operation'])}` | {_cell(r['disk'])} | {_cell(r['outcome'])} |"
              for r in rows[:MAX_POINTS]]
    if len(rows) > MAX_POINTS:
        lines += ["", f"… and {len(rows) - MAX_POINTS} more crash points; see the HTML report."]
    return lines


def render(results: Results) -> str:
    lines: List[str] = [
        f"## {results.title}: {results.summary()}",
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
        lines.append(f"| {ICONS[stored.status]} | `{stored.id}` | {lost} | {divergent} | {_cell(verdict)} |")
    for stored in results.trials:
        lines += _crash_points(stored)
    bad = [t for t in results.trials if t.status in ("failed", "inconclusive")]
    if bad:
        lines += ["", "### Failed and inconclusive trials", ""]
    for stored in bad[:MAX_DETAILS]:
        trial = stored.trial
        lines += [f"<details><summary>{ICONS[stored.status]} <code>{stored.id}</code></summary>", "", trial.headline, ""]
        lines += [f"- **{f.kind}**: {f.message}" for f in trial.findings]
        if stored.replay:
            lines += ["", "Replay it:", "", "```sh", stored.replay, "```"]
        lines += ["", "</details>", ""]
    if len(bad) > MAX_DETAILS:
        folders = " ".join(str(p.source) for p in results.sources)
        lines.append(f"… and {len(bad) - MAX_DETAILS} more; see the HTML report or `chaosckpt report {folders}`.")
    return "\n".join(printable(line) for line in lines).rstrip() + "\n"


def write(results: Results, path: Path) -> None:
    atomic.write_text(path, render(results))
