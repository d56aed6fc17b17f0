"""``chaosckpt report``: render stored results as HTML, JUnit XML or Markdown, apart from running them."""

from __future__ import annotations

from pathlib import Path

import click

import sys

from chaosckpt.conductor.errors import ExitCode, UsageError, exit_code
from chaosckpt.conductor.results import stored

SEVERITY_RANK = {"note": 0, "warning": 1, "error": 2}
FAIL_ON = ("status", "failed", "inconclusive", *reversed(SEVERITY_RANK), "never")
"""``--fail-on``: what makes the report exit non-zero."""
REPORT_EXIT_CODES = """\b
Exit codes:
  0  every trial it read passed
  1  some trial failed: the job is not resilient to the fault
  2  usage error (bad command line, missing or unreadable results)
  3  internal error in chaosckpt (a crash report file is written)
  4  inconclusive: no trial failed, but one had no verdict or never ran
  130, 143, 129  interrupted by Ctrl-C, SIGTERM or SIGHUP
  With --fail-on other than status: 1 when what it names is found, else 0.
"""


def fail_status(results: stored.Results, fail_on: str) -> int:
    """The exit status ``--fail-on`` gives the results: as the run's (``status``), 1 on any failed trial
    (``failed``), on any trial not passed (``inconclusive``), on a failed trial or a finding counted at a severity
    or above (``error``, ``warning``, ``note``), or 0 whatever they hold (``never``)."""
    statuses = ["inconclusive" if t.status == "not-run" else t.status for t in results.trials]
    if fail_on == "never":
        return int(ExitCode.PASSED)
    if fail_on == "status":
        return int(exit_code(statuses))
    failed = "failed" in statuses
    if fail_on == "inconclusive":
        failed = failed or "inconclusive" in statuses
    elif fail_on in SEVERITY_RANK:
        failed = failed or any(SEVERITY_RANK.get(f.severity or "note", 0) >= SEVERITY_RANK[fail_on]
                               for t in results.trials if t.trial for f in t.trial.findings if not f.ignored)
    return int(ExitCode.FAILED if failed else ExitCode.PASSED)


def write_reports(results: stored.Results, html_path, junit_path, markdown_path) -> None:
    """Write each report whose path is given; a path that cannot be written is a usage error."""
    from chaosckpt.conductor.reports import html, junit, markdown  # jinja2 and matplotlib load only when needed

    for path, module in ((html_path, html), (junit_path, junit), (markdown_path, markdown)):
        if path is None:
            continue
        try:
            module.write(results, Path(path))
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


@click.command("report", epilog=REPORT_EXIT_CODES)
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--html", "html_path", type=click.Path(path_type=Path), help="Write a self-contained HTML page here.")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), help="Write JUnit XML here (one testcase per trial).")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path), help="Write a Markdown summary here (for a CI job summary).")
@click.option("--fail-on", type=click.Choice(FAIL_ON), default="status", show_default=True,
              help="Exit 1 on: status (as run and suite exit: 1 failed, 4 inconclusive), any failed trial, any trial not "
                   "passed (inconclusive), a failed trial or a finding of that severity or worse (error, warning, "
                   "note); never: always 0.")
def command(results, html_path, junit_path, markdown_path, fail_on):
    """Render stored RESULTS (suite folders, `chaosckpt run` results folders, or result.json files) as one report.

    \b
    Examples:
      chaosckpt report chaosckpt-results/20261130-020000-suite --html report.html
      chaosckpt report chaosckpt-results/20261130-020000-suite --junit junit.xml --markdown summary.md
      chaosckpt report node-a/chaosckpt-results/*-suite node-b/chaosckpt-results/*-suite --junit all.xml
      chaosckpt report results/*-suite --markdown summary.md --fail-on warning   # fail CI on any warning too

    Several RESULTS make one report: in JUnit, one testsuite per folder; in
    HTML and Markdown, each trial's id is prefixed with its folder's name.
    With no format option, prints the Markdown summary. The reports are written
    whatever the verdicts; the exit status then says them, as --fail-on asks.
    """
    loaded = stored.combine(list(results))
    if not (html_path or junit_path or markdown_path):
        from chaosckpt.conductor.reports import markdown

        click.echo(markdown.render(loaded), nl=False)
    else:
        write_reports(loaded, html_path, junit_path, markdown_path)
    sys.exit(fail_status(loaded, fail_on))
