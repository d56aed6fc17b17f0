"""JUnit XML for CI: one testcase per trial; a failure's message is its headline."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from chaosckpt.conductor import atomic
from chaosckpt.conductor.reports.stored import Results, StoredTrial


def _details(stored: StoredTrial) -> str:
    lines = [f"- {f.kind}: {f.message}" for f in stored.trial.findings]
    if stored.trial.detail:
        lines.append(stored.trial.detail)
    if stored.replay:
        lines.append(f"replay: {stored.replay}")
    lines.append(f"results and logs: {stored.folder}")
    return "\n".join(lines)


def render(results: Results) -> str:
    """The XML document: failed trials as ``<failure>``, inconclusive ones as ``<error>``, not-run as ``<skipped>``."""
    counts = results.counts()
    total_time = sum(r.duration_s for t in results.trials if t.trial for r in t.trial.runs)
    root = ET.Element("testsuites", name="chaosckpt", tests=str(len(results.trials)), failures=str(counts["failed"]),
                      errors=str(counts["inconclusive"]), skipped=str(counts["not-run"]), time=f"{total_time:.3f}")
    suite = ET.SubElement(root, "testsuite", name=results.title, tests=str(len(results.trials)),
                          failures=str(counts["failed"]), errors=str(counts["inconclusive"]),
                          skipped=str(counts["not-run"]), time=f"{total_time:.3f}", timestamp=results.created)
    for stored in results.trials:
        trial = stored.trial
        duration = sum(r.duration_s for r in trial.runs) if trial else 0.0
        case = ET.SubElement(suite, "testcase", classname=f"chaosckpt.{stored.scenario}", name=stored.id, time=f"{duration:.3f}")
        if trial is None:
            ET.SubElement(case, "skipped", message="not run: the suite was interrupted before this trial finished")
        elif trial.status == "failed":
            ET.SubElement(case, "failure", message=trial.headline, type="not-resilient").text = _details(stored)
        elif trial.status == "inconclusive":
            ET.SubElement(case, "error", message=trial.headline, type=trial.reason or "inconclusive").text = _details(stored)
        if trial is not None:
            ET.SubElement(case, "system-out").text = f"{trial.headline}\nresults and logs: {stored.folder}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write(results: Results, path: Path) -> None:
    atomic.write_text(path, render(results))
