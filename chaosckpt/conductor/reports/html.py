"""The HTML report: one self-contained page (inline CSS and SVG, no scripts, nothing fetched) per results."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import jinja2
from markupsafe import Markup

from chaosckpt.conductor.errors import printable
from chaosckpt.conductor.reports import plot
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.stored import Results, StoredTrial


def timeline(stored: StoredTrial) -> List[str]:
    """The trial's story in a few facts: steps, saves, the fault, the resume point."""
    trial = stored.trial
    facts = []
    reference = stored.trainer("reference")
    if reference is not None:
        facts.append(f"the reference run took {len(reference.steps)} optimizer steps")
    saver = stored.saver("reference")
    if saver is not None and saver.completed_saves():
        facts.append("it saved after steps " + ", ".join(str(s.step) for s in saver.completed_saves()))
    if trial.fault:
        fault = trial.fault
        at = f", at step {fault['step']}" if fault.get("step") is not None else ""
        if fault.get("in_file") and fault.get("path"):  # its bytes and write counted in that one file
            where, writing = "", f", {fault['bytes']} bytes into {fault['path']} (its write {fault['write']})"
        else:
            where = f" after {fault['bytes']} bytes (write {fault['write']})" if fault.get("bytes") is not None else ""
            writing = f", writing {fault['path']}" if fault.get("path") else ""
        facts.append(f"the fault hit save {fault['save']}{where}{at}{writing}{_in_flight(fault)}")
    if trial.last_good_step is not None:
        facts.append(f"the last good checkpoint was step {trial.last_good_step}")
    if trial.outcome is not None:
        start = f" from step {trial.recovered_step}" if trial.recovered_step is not None else ""
        facts.append(f"the resumed job: {trial.outcome}{start}" + (f", {trial.lost_steps} steps lost" if trial.lost_steps else ""))
    if trial.first_divergent_step is not None:
        facts.append(f"its trajectory parted from the reference at step {trial.first_divergent_step}")
    return facts


def _in_flight(fault: dict) -> str:
    """Where a fault in an asynchronous save struck: the background thread, and the training going on."""
    if fault.get("thread") is None:
        return ""
    steps = fault.get("steps_in_flight", 0)
    going = f"{steps} training step{'s' if steps != 1 else ''} after the save began" if steps else (
        "before the training took another step")
    if fault.get("held"):
        going += ", the training held there"
    noticed = {True: "; the job noticed its error", False: "; the job never noticed its error"}.get(
        fault.get("noticed"), "")
    return f", in its background thread {fault['thread']}, {going}{noticed}"


def _figure(stored: StoredTrial) -> Optional[Markup]:
    drawn = plot.svg(stored)
    return Markup(drawn) if drawn is not None else None


def _printable(value: object) -> object:
    """What the template prints, names escaped as everywhere else (the drawn figure, markup already, as it is)."""
    return printable(value) if isinstance(value, str) and not isinstance(value, Markup) else value


def render(results: Results) -> str:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("chaosckpt.conductor.reports", "templates"),
        autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
        finalize=_printable,
    )
    cards = [
        {"stored": s, "timeline": timeline(s) if s.trial else [], "figure": _figure(s) if s.trial else None}
        for s in results.trials
    ]
    return env.get_template("report.html.j2").render(results=results, cards=cards)


def write(results: Results, path: Path) -> None:
    atomic.write_text(path, render(results))
