"""``chaosckpt report``: render stored results as HTML, JUnit XML or Markdown, apart from running them."""

from __future__ import annotations

from pathlib import Path

import click

from chaosckpt.conductor.errors import READING_EXIT_CODES, UsageError
from chaosckpt.conductor.results import stored


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


@click.command("report", epilog=READING_EXIT_CODES)
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--html", "html_path", type=click.Path(path_type=Path), help="Write a self-contained HTML page here.")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), help="Write JUnit XML here (one testcase per trial).")
@click.option("--markdown", "markdown_path", type=click.Path(path_type=Path), help="Write a Markdown summary here (for a CI job summary).")
def command(results, html_path, junit_path, markdown_path):
    """Render stored RESULTS (suite folders, `chaosckpt run` results folders, or result.json files) as one report.

    \b
    Examples:
      chaosckpt report chaosckpt-results/20261130-020000-suite --html report.html
      chaosckpt report chaosckpt-results/20261130-020000-suite --junit junit.xml --markdown summary.md
      chaosckpt report node-a/chaosckpt-results/*-suite node-b/chaosckpt-results/*-suite --junit all.xml

    Several RESULTS make one report: in JUnit, one testsuite per folder; in
    HTML and Markdown, each trial's id is prefixed with its folder's name.
    With no format option, prints the Markdown summary.
    """
    loaded = stored.combine(list(results))
    if not (html_path or junit_path or markdown_path):
        from chaosckpt.conductor.reports import markdown

        click.echo(markdown.render(loaded), nl=False)
        return
    write_reports(loaded, html_path, junit_path, markdown_path)
