"""The figure of a trial: a timeline (steps, saves, the fault, the resume point) over reference vs resumed loss.

Drawn with matplotlib's Agg backend (no display needed) as SVG text to inline in the HTML report;
matplotlib is imported only when a figure is drawn, as it takes a second to load.
"""

from __future__ import annotations

import io
from typing import List, Optional, Tuple

from chaosckpt.conductor.results.stored import StoredTrial
from chaosckpt.conductor.runs.runlog import ProcessLog

Series = List[Tuple[int, float]]


def _losses(proc: Optional[ProcessLog], first_step: int = 1) -> Series:
    """(global step, mean loss of the step's backward passes) for each step that recorded a loss."""
    if proc is None:
        return []
    return [(first_step + i, sum(s["loss"]) / len(s["loss"])) for i, s in enumerate(proc.steps) if s.get("loss")]


def svg(stored: StoredTrial) -> Optional[str]:
    """The trial's figure as an ``<svg>`` element, or None when its reference run recorded no loss."""
    trial = stored.trial
    reference = _losses(stored.trainer("reference"))
    if trial is None or not reference:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.figure import Figure

    faulted = _losses(stored.trainer("faulted"))
    fault_step = (trial.fault or {}).get("step")
    if fault_step is not None:
        faulted = [p for p in faulted if p[0] <= fault_step]
    resumed = _losses(stored.trainer("resume"), (trial.recovered_step or 0) + 1) if trial.recovered_step is not None else []
    saver = stored.saver("reference")
    saves = [s.step for s in saver.completed_saves()] if saver is not None else []
    last = max(p[0] for p in reference)

    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": stored.id, "font.size": 8}):
        fig = Figure(figsize=(7.5, 3.4), layout="constrained")
        top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[1, 4])
        top.set_ylim(-1, 1)
        top.set_yticks([])
        top.hlines(0, 0, last, color="#bbb", linewidth=6, label="steps")
        if faulted:
            top.hlines(0.45, 0, faulted[-1][0], color="#e69f00", linewidth=4, label="faulted run")
        if resumed:
            top.hlines(-0.45, resumed[0][0] - 1, resumed[-1][0], color="#009e73", linewidth=4, label="resumed run")
        top.plot(saves, [0] * len(saves), "|", color="#333", markersize=14, markeredgewidth=2, label="saves")
        if fault_step is not None:
            top.plot([fault_step], [0.45], "X", color="#d55e00", markersize=9, label="fault")
        if trial.recovered_step is not None:
            top.plot([trial.recovered_step], [-0.45], ">", color="#009e73", markersize=8, label="resume point")
        top.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
        top.set_title("timeline", loc="left", fontsize=8)

        bottom.plot(*zip(*reference), color="#777", linewidth=2.5, label="reference")
        if faulted:
            bottom.plot(*zip(*faulted), color="#e69f00", linewidth=1, linestyle="--", label="faulted")
        if resumed:
            bottom.plot(*zip(*resumed), color="#009e73", linewidth=1.2, label="resumed")
        if fault_step is not None:
            bottom.axvline(fault_step, color="#d55e00", linewidth=1, linestyle=":")
        if trial.first_divergent_step is not None:
            bottom.axvline(trial.first_divergent_step, color="#cc0000", linewidth=1, label="first divergent step")
        bottom.set_xlabel("optimizer step")
        bottom.set_ylabel("loss")
        bottom.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    text = out.getvalue()
    return text[text.index("<svg"):]
