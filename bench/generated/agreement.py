"""The agreement table: chaosckpt and the independent judge on the same generated jobs and faults.

    python bench/generated/agreement.py --jobs 8              # the first 8 rows of the seed-0 covering array
    python bench/generated/agreement.py --jobs 8 --json out.jsonl --markdown table.md

For each job (one at a time) and fault, the judge (``judge.py``) establishes the truth by experiment, and chaosckpt
runs the same job copy through its CLI (``python -m chaosckpt run``, a subprocess: nothing of chaosckpt is imported
here either) under the matching scenario and place:

    judge ``kill``   (SIGKILL at the middle write of save 2's file)  <->  kill9-mid-save -p save=2 -p fraction=0.5
    judge ``enospc`` (ENOSPC at that write)                           <->  enospc -p save=2 -p fraction=0.5

The places are alike, not identical: the judge counts write syscalls of the file; chaosckpt a fraction of the save's
bytes at its own level. Both land inside save 2, before its file is complete, which is what the truth turns on.

Compared: verdict (PASS/FAIL), outcome, recovered step, lost steps, and cause kinds (chaosckpt's error and warning
findings among the kinds the judge predicts, against the judge's prediction). The table is printed per dimension
value. A false PASS (chaosckpt passed where the judge says the resume missed the last good checkpoint or did not
reproduce) is listed first, and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import jobgen  # noqa: E402
import judge  # noqa: E402

SCENARIOS = {"kill": ["-s", "kill9-mid-save", "-p", "save=2", "-p", "fraction=0.5"],
             "enospc": ["-s", "enospc", "-p", "save=2", "-p", "fraction=0.5"]}


ALIASES = {"rng-captured-early": "rng-not-restored", "rng-drawn-after-restore": "rng-not-restored"}
"""chaosckpt's kinds read as the judge's cause classes: the judge names one class, "the random streams were not
restored", where chaosckpt names how (taken too early; drawn after the restore). ``rng-states-missing`` is not
among them: it is advice on what the checkpoint holds, said whatever the trial did (a latent defect, as
``checkpoint-lacks-state``), where the judge names only causes that acted in the trial."""


def causes_of(findings: List[Dict]) -> List[str]:
    """chaosckpt's error and warning findings as the judge's cause classes, those the judge predicts only."""
    kinds = {ALIASES.get(f["kind"], f["kind"]) for f in findings if f.get("severity", "error") in ("error", "warning")}
    return sorted(kinds & set(judge.VOCABULARY))


def chaosckpt(row: Dict[str, str], fault: str, scratch: Path) -> Dict:
    """chaosckpt's trial of the job under the fault: status, outcome, recovered step, lost steps, finding kinds. The
    job's faults share one project folder, so the second trial reuses the uninterrupted run chaosckpt cached."""
    project = scratch / "project"
    if not (project / "train.py").is_file() or (project / "train.py").read_text() != jobgen.script(row):
        shutil.rmtree(scratch, ignore_errors=True)
        project.mkdir(parents=True)
        (project / "train.py").write_text(jobgen.script(row))
    shutil.rmtree(scratch / f"results-{fault}", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", "chaosckpt", "run", "train.py", *SCENARIOS[fault], "--json", "--out",
            str(scratch / f"results-{fault}"), "--timeout", "300"]
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=1800, env=env)
    seconds = round(time.monotonic() - started, 1)
    try:
        trial = json.loads(proc.stdout)["trials"][0]
    except (ValueError, KeyError, IndexError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": "error", "outcome": None, "recovered_step": None, "lost_steps": None, "kinds": [],
                "causes": [], "headline": f"exit {proc.returncode}: {tail}", "seconds": seconds}
    kinds = [f"{f['kind']} ({f.get('severity', '?')})" for f in trial.get("findings", [])]
    causes = causes_of(trial.get("findings", []))
    return {"status": trial["status"], "outcome": trial.get("outcome"), "recovered_step": trial.get("recovered_step"),
            "lost_steps": trial.get("lost_steps"), "kinds": kinds, "causes": causes,
            "headline": trial.get("headline", ""), "findings": trial.get("findings", []), "seconds": seconds}


def compare(truth: Dict, got: Dict, row: Dict[str, str]) -> Dict[str, bool]:
    """Which aspects agree. Steps lost under a saver thread are counted from the faulted save's step (see
    ``judge.Truth.lost_from_save``)."""
    verdict = {"passed": "PASS", "failed": "FAIL"}.get(got["status"], got["status"].upper())
    recovered = truth["recovered_step"]
    got_recovered = got["recovered_step"]
    if truth["outcome"] == "scratch" and got_recovered is None:
        got_recovered = 0
    return {"verdict": verdict == truth["verdict"],
            "outcome": got["outcome"] == truth["outcome"],
            "recovered": got_recovered == recovered,
            "lost": got["lost_steps"] == truth["lost_steps" if row["saver"] == "sync" else "lost_from_save"],
            "causes": got["causes"] == truth["expected_causes"]}


def false_pass(truth: Dict, got: Dict) -> bool:
    return got["status"] == "passed" and truth["verdict"] == "FAIL"


ASPECTS = ("verdict", "outcome", "recovered", "lost", "causes")


def table(results: List[Dict]) -> List[str]:
    lines = []
    bad = [r for r in results if r["false_pass"]]
    lines.append(f"## False PASS: {len(bad)}")
    for r in bad:
        lines.append(f"- {r['job']} x {r['fault']}: chaosckpt PASSED; judge {r['truth']['verdict']} "
                     f"({r['truth']['outcome']}, reproduced {r['truth']['reproduced']})")
    lines.append("")
    lines.append("## Per job and fault")
    lines.append("| job | fault | judge | chaosckpt | " + " | ".join(ASPECTS) + " |")
    lines.append("|---|---|---|---|" + "---|" * len(ASPECTS))
    for r in results:
        t, g = r["truth"], r["chaosckpt"]
        lines.append(f"| {r['job']} | {r['fault']} | {t['verdict']} {t['outcome']} rec {t['recovered_step']} "
                     f"lost {t['lost_steps']} {'+'.join(t['expected_causes']) or '-'} | "
                     f"{g['status']} {g['outcome']} rec {g['recovered_step']} lost {g['lost_steps']} "
                     f"{'+'.join(g['causes']) or '-'} | "
                     + " | ".join("yes" if r["agree"][a] else "**no**" for a in ASPECTS) + " |")
    lines.append("")
    lines.append("## Per dimension value (agreeing / trials)")
    lines.append("| dimension | value | trials | " + " | ".join(ASPECTS) + " |")
    lines.append("|---|---|---|" + "---|" * len(ASPECTS))
    for name, values in jobgen.DIMENSIONS.items():
        for value in values:
            rows = [r for r in results if r["row"][name] == value]
            if not rows:
                lines.append(f"| {name} | {value} | 0 |" + " - |" * len(ASPECTS))
                continue
            lines.append(f"| {name} | {value} | {len(rows)} | "
                         + " | ".join(f"{sum(r['agree'][a] for r in rows)}/{len(rows)}" for a in ASPECTS) + " |")
    lines.append("")
    n = len(results)
    lines.append("Overall: " + ", ".join(f"{a} {sum(r['agree'][a] for r in results)}/{n}" for a in ASPECTS)
                 + f"; false PASS {len(bad)}")
    return lines


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=8, help="N jobs: the covering array's rows first, then rows drawn by the seed")
    parser.add_argument("--only", type=int, action="append", help="only these row numbers (0-based)")
    parser.add_argument("--fault", action="append", choices=tuple(SCENARIOS))
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/chaosckpt-agreement"))
    parser.add_argument("--json", type=Path, help="append each result as a JSON line")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument("--from-json", type=Path, help="no runs: the table of results a --json run kept, compared "
                        "again (the judge's causes and chaosckpt's findings read by the current rules)")
    args = parser.parse_args(argv)
    if args.from_json:
        results = []
        for line in args.from_json.read_text().splitlines():
            r = json.loads(line)
            r["row"].setdefault("saver", "sync")  # kept before the saver dimension: the training thread saved
            truth = judge.Truth(**r["truth"])
            truth.expected_causes = judge.causes(r["row"], truth)
            r["truth"] = asdict(truth)
            r["chaosckpt"]["causes"] = causes_of(r["chaosckpt"].get("findings", []))
            r["agree"] = compare(r["truth"], r["chaosckpt"], r["row"])
            r["false_pass"] = false_pass(r["truth"], r["chaosckpt"])
            results.append(r)
        lines = table(results)
        print("\n".join(lines))
        if args.markdown:
            args.markdown.write_text("\n".join(lines) + "\n")
        return 1 if any(r["false_pass"] for r in results) else 0
    rows = list(enumerate(jobgen.sample(args.jobs, args.seed)))
    if args.only:
        rows = [(i, r) for i, r in rows if i in args.only]
    results = []
    for i, row in rows:
        reference = None
        for fault in args.fault or list(SCENARIOS):
            t0 = time.monotonic()
            truth, reference = judge.judge(row, fault, args.scratch / f"{i}" / "judge", reference=reference)
            t1 = time.monotonic()
            got = chaosckpt(row, fault, args.scratch / f"{i}" / "chaosckpt")
            t = asdict(truth)
            result = {"index": i, "job": jobgen.job_id(row), "row": row, "fault": fault, "truth": t, "chaosckpt": got,
                      "agree": compare(t, got, row), "false_pass": false_pass(t, got),
                      "judge_s": round(t1 - t0, 1), "chaosckpt_s": got["seconds"]}
            results.append(result)
            wrong = [a for a in ASPECTS if not result["agree"][a]]
            print(f"[{i}] {result['job']} x {fault}: judge {t['verdict']} {t['outcome']} rec {t['recovered_step']} "
                  f"lost {t['lost_steps']} {t['expected_causes']} ({result['judge_s']} s); chaosckpt {got['status']} "
                  f"{got['outcome']} rec {got['recovered_step']} lost {got['lost_steps']} {got['causes']} "
                  f"({got['seconds']} s){'  <-- ' + ', '.join(wrong) if wrong else ''}", file=sys.stderr, flush=True)
            if wrong:
                print(f"    judge: {t['placement']}; notes {t['notes']}\n    chaosckpt: {got['headline']}\n"
                      f"    chaosckpt kinds: {got['kinds']}", file=sys.stderr, flush=True)
            if args.json:
                with args.json.open("a") as f:
                    f.write(json.dumps(result) + "\n")
    lines = table(results)
    print("\n".join(lines))
    if args.markdown:
        args.markdown.write_text("\n".join(lines) + "\n")
    return 1 if any(r["false_pass"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
