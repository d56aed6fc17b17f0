"""``chaosckpt repro``: from a failed trial to a bug report for the trainer's maintainers: a folder with the replay
command, the scenario pinned, the versions, the verdict's evidence and an ``ISSUE.md`` draft, local paths removed."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
from pathlib import Path
from typing import Dict, List, Optional

import click

from chaosckpt import __version__
from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.results import atomic, stored
from chaosckpt.conductor.runs import logcap
from chaosckpt.conductor.runs.runlog import RunLog

FRAMEWORKS = ("lightning", "pytorch_lightning", "transformers", "accelerate", "safetensors", "deepspeed", "timm",
              "torchvision", "torchtitan", "numpy")
"""Import names whose versions a report names when the job's output or script mentions them."""
TAIL_LINES = 40
EPILOG = """\b
Exit codes:
  0  the folder was written
  2  usage error (no such results or trial, nothing failed, the folder exists)
"""


class Scrub:
    """Local paths out of text: the results folder, the project, the home folder, the machine's name."""

    def __init__(self, results: Path, hostname: str) -> None:
        self.pairs = [(str(results.resolve()), "<results>"), (str(Path.cwd().resolve()), "<project>"),
                      (str(Path.home()), "~")]
        self.pairs += [(hostname, "<host>")] if hostname else []

    def __call__(self, text: str) -> str:
        for local, shown in self.pairs:
            text = text.replace(local, shown)
        return re.sub(r"/tmp/[^\s'\"]*chaosckpt[^\s'\"]*", "<tmp>", text)


def chosen(results: stored.Results, wanted: Optional[str]) -> stored.StoredTrial:
    """The trial ``wanted`` by id, else the first that failed, else the first inconclusive one."""
    ran = [t for t in results.trials if t.trial is not None]
    if wanted is not None:
        found = [t for t in ran if t.id == wanted]
        if not found:
            raise UsageError(f"no trial {wanted} with a verdict in {results.source} (it holds "
                             f"{', '.join(t.id for t in ran) or 'none'})")
        return found[0]
    for status in ("failed", "inconclusive"):
        found = [t for t in ran if t.status == status]
        if found:
            return found[0]
    raise UsageError(f"every trial in {results.source} passed: nothing to report")


def versions(item: stored.StoredTrial, mentioned: str) -> Dict[str, str]:
    """Python and torch as the job's reference run reported them, chaosckpt's, and the installed frameworks the
    job's output or script names."""
    out = {"chaosckpt": __version__}
    runs = {r.name: r for r in item.trial.runs} if item.trial else {}
    first = runs.get("reference") or next(iter(runs.values()), None)
    hello = next((p.hello for p in RunLog.read(Path(first.events)).processes if p.hello), None) if first else None
    if hello:
        out.update(python=str(hello.get("python")), torch=str(hello.get("torch")))
    for name in FRAMEWORKS:
        if re.search(rf"\b{name}\b", mentioned):
            try:
                out[name] = importlib.metadata.version(name.replace("_", "-"))
            except importlib.metadata.PackageNotFoundError:
                continue
    return out


def _tail(path: str) -> str:
    try:
        return "\n".join(logcap.tail(Path(path), 20000).splitlines()[-TAIL_LINES:])
    except OSError:
        return ""


def _script_text(command: List[str]) -> str:
    scripts = [Path(a) for a in command if a.endswith(".py")]
    return "".join(p.read_text(errors="replace") for p in scripts[:1] if p.is_file())


def issue(item: stored.StoredTrial, found: Dict[str, str], resume_tail: str) -> str:
    trial = item.trial
    findings = "\n".join(f"- `{f.kind}`: {f.message}" for f in trial.findings if not f.ignored) or "- none"
    listed = "\n".join(f"- {k}: {v}" for k, v in found.items())
    return f"""# Training does not survive `{trial.scenario}`: {trial.headline.split(': ', 1)[-1][:120]}

## Expected

After the fault, the job resumes from its last complete checkpoint and trains on as an uninterrupted run does.

## Observed

{trial.headline}

{findings}

## How to reproduce

[chaosckpt](https://pypi.org/project/chaosckpt/) injects the fault and scores the recovery. From the project's
folder:

```sh
{item.replay or 'chaosckpt run --scenario ' + trial.scenario}
```

`scenario.toml` beside this file holds the scenario with its placement as run.

## Environment

{listed}

## The resumed run's last lines

```
{resume_tail or '(none recorded)'}
```
"""


def scenario_toml(item: stored.StoredTrial) -> str:
    """The trial's scenario with every parameter as it ran, for ``chaosckpt run --scenario scenario.toml``."""
    from chaosckpt.conductor import scenario as scenarios  # faults, and through them torch-free modules only

    loaded = scenarios.load(item.trial.scenario) if not item.trial.scenario.endswith(".toml") else None
    lines = [f"name = {json.dumps(item.trial.scenario)}"]
    if loaded is not None:
        lines += [f"summary = {json.dumps(loaded.summary)}", f"fault = {json.dumps(loaded.fault)}"]
    for section in ("trigger", "expect"):
        values = {k: v for k, v in item.trial.params.get(section, {}).items() if v is not None}
        lines += ["", f"[{section}]", *(f"{k} = {json.dumps(v)}" for k, v in values.items())]
    return "\n".join(lines) + "\n"


@click.command("repro", epilog=EPILOG)
@click.argument("results", type=click.Path(path_type=Path))
@click.argument("trial", required=False)
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="The folder to write (default: chaosckpt-repro-<trial> here); it must not exist.")
def command(results: Path, trial: Optional[str], out: Optional[Path]) -> None:
    """Turn a failed trial into a bug report: a folder holding the replay command, the scenario with its placement
    pinned (scenario.toml), the versions, the verdict's evidence (evidence.json) and an ISSUE.md draft for the
    trainer's maintainers, with local paths replaced by <results>, <project> and ~. TRIAL is a suite trial's id;
    default: the first that failed.

    \b
    Examples:
      chaosckpt repro chaosckpt-results/20261207-020000-kill9-mid-save
      chaosckpt repro chaosckpt-results/20261207-020000-suite late-cut --out report/
    """
    loaded = stored.load(results)
    item = chosen(loaded, trial)
    folder = out or Path(f"chaosckpt-repro-{re.sub(r'[^A-Za-z0-9_.=-]', '_', item.id)}")
    if folder.exists():
        raise UsageError(f"{folder} already exists: give another --out")
    scrub = Scrub(results, loaded.hostname)
    runs = {r.name: r for r in item.trial.runs}
    resume = runs.get("resume")
    resume_tail = scrub(_tail(resume.stderr) + "\n" + _tail(resume.stdout)).strip() if resume else ""
    command_line = (runs.get("faulted") or runs.get("reference") or resume).command if runs else []
    mentioned = " ".join([_script_text(command_line), resume_tail, *(_tail(r.stderr) for r in runs.values())])
    found = versions(item, mentioned)
    evidence = {"id": item.id, "scenario": item.trial.scenario, "status": item.trial.status,
                "headline": item.trial.headline, "replay": item.replay,
                "findings": [{"kind": f.kind, "message": f.message, **f.details} for f in item.trial.findings],
                "fault": item.trial.fault, "versions": found}
    folder.mkdir(parents=True)
    atomic.write_text(folder / "evidence.json", scrub(json.dumps(evidence, indent=2, default=str)) + "\n")
    atomic.write_text(folder / "replay.sh", "#!/bin/sh\n# from the project's folder\n" + scrub(item.replay or "") + "\n")
    os.chmod(folder / "replay.sh", 0o755)
    atomic.write_text(folder / "scenario.toml", scenario_toml(item))
    atomic.write_text(folder / "ISSUE.md", scrub(issue(item, found, resume_tail)))
    click.echo(f"chaosckpt: wrote {folder}/: ISSUE.md, evidence.json, replay.sh, scenario.toml (local paths removed; "
               "read them before you send them)")
