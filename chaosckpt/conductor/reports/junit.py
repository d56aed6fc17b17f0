"""JUnit XML for CI, valid against the schema Jenkins' xunit plugin checks (junit-10.xsd).

One ``<testsuite>`` per results folder, one ``<testcase>`` per trial. That schema allows ``<properties>``
on a testsuite only, so each trial's scenario, parameters and replay line are properties named
``<trial id>.scenario``, ``<trial id>.params`` and ``<trial id>.replay``; the suite's seed is ``seed``.

Text the job wrote (its command, its stderr in a headline) is escaped as in the HTML report: ElementTree escapes
markup, and every control, bidi or other hidden character is written as an escape (``\n``, ``\x1b``), since XML
may not hold most of them and a CI page would show them raw.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from chaosckpt.conductor.errors import printable
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.stored import Results, StoredTrial


def _lines(*lines: object) -> str:
    """Lines of text for an element or attribute, each made printable (see the module's docstring)."""
    return "\n".join(printable(str(line)) for line in lines)


def _details(stored: StoredTrial) -> str:
    lines = [f"- {f.kind}: {f.message}" for f in stored.trial.findings]
    if stored.trial.detail:
        lines += stored.trial.detail.splitlines()
    if stored.replay:
        lines.append(f"replay: {stored.replay}")
    if stored.smallest:
        lines.append(f"smallest that fails the same way: {stored.smallest}")
    lines.append(f"results and logs: {stored.folder}")
    return _lines(*lines)


def _counts(results: Results) -> dict:
    counts = results.counts()
    return {"tests": str(len(results.trials)), "failures": str(counts["failed"]), "errors": str(counts["inconclusive"])}


def _time(results: Results) -> str:
    return f"{results.run_time():.3f}"


def _properties(parent: ET.Element, results: Results) -> None:
    values = [("command", results.command), ("chaosckpt", results.version)]
    if results.seed is not None:
        values.append(("seed", str(results.seed)))
    for stored in results.trials:
        values += [(f"{stored.id}.scenario", stored.scenario),
                   (f"{stored.id}.params", json.dumps(stored.params, sort_keys=True))]
        if stored.replay:
            values.append((f"{stored.id}.replay", stored.replay))
    properties = ET.SubElement(parent, "properties")
    for name, value in values:
        ET.SubElement(properties, "property", name=_lines(name), value=_lines(value))


def _testsuite(root: ET.Element, results: Results, index: int) -> None:
    counts = results.counts()
    attrs = {"name": _lines(results.title), **_counts(results), "skipped": str(counts["not-run"] + counts["skipped"]),
             "time": _time(results), "id": str(index), "package": "chaosckpt"}
    if results.created:
        attrs["timestamp"] = _lines(results.created)
    if results.hostname:
        attrs["hostname"] = _lines(results.hostname)
    suite = ET.SubElement(root, "testsuite", attrs)
    _properties(suite, results)
    for stored in results.trials:
        trial = stored.trial
        case = ET.SubElement(suite, "testcase", classname=_lines(f"chaosckpt.{Path(stored.scenario).stem}"),
                             name=_lines(stored.id), time=f"{stored.own_time:.3f}")
        if trial is None:
            ET.SubElement(case, "skipped", message=_lines(stored.skipped and f"skipped: {stored.skipped}"
                                                          or "not run: the suite was interrupted before this trial finished"))
            continue
        headline = _lines(trial.headline)
        if trial.status == "failed":
            ET.SubElement(case, "failure", message=headline, type="not-resilient").text = _details(stored)
        elif trial.status == "inconclusive":
            ET.SubElement(case, "error", message=headline, type=_lines(trial.reason or "inconclusive")).text = _details(stored)
        ET.SubElement(case, "system-out").text = _lines(trial.headline, f"results and logs: {stored.folder}")


def render(results: Results) -> str:
    """The XML document: failed trials as ``<failure>``, inconclusive ones as ``<error>``, skipped and not-run
    ones as ``<skipped>`` with the reason."""
    root = ET.Element("testsuites", name="chaosckpt", **_counts(results), time=_time(results))
    for index, part in enumerate(results.sources):
        _testsuite(root, part, index)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(results: Results, path: Path) -> None:
    atomic.write_text(path, render(results))
