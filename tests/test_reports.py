"""Reports rendered from stored results: HTML (checked in a real headless browser), JUnit XML, Markdown."""

from __future__ import annotations

import json
import os
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import browser
import pytest
import xmlschema
from conftest import read_junit, run_chaosckpt
from stored_results import run_folder

from chaosckpt.conductor.reports import html, junit, markdown
from chaosckpt.conductor.results import stored


def test_junit_has_one_testcase_per_trial_and_the_headline_as_failure_message(suite_dir):
    root = ET.fromstring(junit.render(stored.load(suite_dir)))
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert list(cases) == ["ok", "bad<b>", "later"]
    assert cases["ok"].find("failure") is None and cases["ok"].find("skipped") is None
    failure = cases["bad<b>"].find("failure")
    assert failure.get("message").startswith("FAILED kill9-mid-save: resumed from the last good checkpoint (step 4) but diverged")
    assert "rng-not-restored: the numpy stream was not restored" in failure.text
    assert "chaosckpt run --scenario kill9-mid-save -p save=2 -p fraction=0.25" in failure.text
    assert cases["later"].find("skipped") is not None
    assert (root.get("tests"), root.get("failures")) == ("3", "1")
    assert root.find("testsuite").get("skipped") == "1" and root.get("skipped") is None  # junit-10 has no skipped on <testsuites>


def test_every_junit_file_validates_against_junit_10_and_reads_back(suite_dir, tmp_path):
    one_run = run_folder(tmp_path)
    outputs = {"suite": suite_dir, "run": one_run, "combined": None}
    for name, source in outputs.items():
        path = tmp_path / f"{name}.xml"
        args = [str(suite_dir), str(one_run)] if source is None else [str(source)]
        res = run_chaosckpt(["report", *args, "--junit", str(path), "--fail-on", "never"], cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        xml = read_junit(path)
        suites = list(xml)
        assert [s.name for s in suites] == {"suite": ["chaosckpt suite suite"], "run": [f"chaosckpt results {one_run.name}"],
                                            "combined": ["chaosckpt suite suite", f"chaosckpt results {one_run.name}"]}[name]
        for suite in suites:
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", suite.timestamp), suite.timestamp
    run_suite = list(read_junit(tmp_path / "run.xml"))[0]
    assert run_suite.hostname == "node-7" and run_suite.timestamp.startswith("2026-12-01T22:49:39")
    props = {p.name: p.value for p in run_suite.properties()}
    assert props["kill9-mid-save.scenario"] == "kill9-mid-save"
    assert json.loads(props["kill9-mid-save.params"]) == {"save": 2, "fraction": 0.5}
    assert props["kill9-mid-save.replay"] == ("chaosckpt run --scenario kill9-mid-save -p save=2 -p fraction=0.5 "
                                              "--resume-args=--resume -- train.py")
    [case] = list(run_suite)
    assert case.time == 3.0  # the faulted and resumed runs' 1.5 s each; the cached reference's 30 s are not this trial's
    assert case.result[0].message.startswith("FAILED kill9-mid-save")
    suite = list(read_junit(tmp_path / "suite.xml"))[0]
    props = {p.name: p.value for p in suite.properties()}
    assert props["bad<b>.replay"].startswith("chaosckpt run --scenario kill9-mid-save -p save=2 -p fraction=0.25")
    assert json.loads(props["bad<b>.params"]) == {"save": 2, "fraction": 0.25}
    assert suite.timestamp.startswith("2026-11-30T02:00:00")  # a suite stored before timestamps were ISO 8601
    combined = read_junit(tmp_path / "combined.xml")
    assert (combined.tests, combined.failures, combined.errors) == (4, 2, 0)

    # the schema refuses what chaosckpt 0.1.0 wrote: skipped on <testsuites>, a timestamp that is not ISO 8601
    text = (tmp_path / "suite.xml").read_text()
    for before, after in (('<testsuites name="chaosckpt"', '<testsuites skipped="1" name="chaosckpt"'),
                          ('timestamp="2026-11-30T02:00:00', 'timestamp="2026-11-30 02:00:00')):
        broken = tmp_path / "broken.xml"
        broken.write_text(text.replace(before, after, 1))
        with pytest.raises(xmlschema.XMLSchemaValidationError):
            read_junit(broken)


def test_report_combines_any_number_of_folders_into_one_html_and_markdown(suite_dir, tmp_path):
    first, second = run_folder(tmp_path / "a", "passed"), run_folder(tmp_path / "b")
    res = run_chaosckpt(["report", str(suite_dir), str(first), str(second), "--html", "all.html", "--markdown", "all.md"], cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # a failed trial among them: the report fails as the run did
    text = (tmp_path / "all.md").read_text()
    assert text.startswith("## chaosckpt report of 3 folders (5 trials): 2 passed, 2 failed, 1 not run\n")
    assert f"`{suite_dir}` (1 passed, 1 failed, 1 not run)" in text
    assert "| ❌ | `suite/bad<b>` |" in text and "| ✅ | `suite/ok` |" in text
    # the two run folders share a name: told apart by their paths
    assert f"`a/results/{first.name}/kill9-mid-save`" in text and f"`b/results/{second.name}/kill9-mid-save`" in text
    page = (tmp_path / "all.html").read_text()
    assert page.count("<svg") == 4 and 'id="suite/ok"' in page and "on node-7" in page
    missing = run_chaosckpt(["report", str(suite_dir), str(tmp_path / "nothing")], cwd=tmp_path)
    assert missing.returncode == 2 and "holds no chaosckpt results" in missing.stderr


def test_markdown_summary_tables_every_trial_and_details_the_failure(suite_dir):
    text = markdown.render(stored.load(suite_dir))
    assert text.startswith("## chaosckpt suite suite: 1 passed, 1 failed, 1 not run\n")
    assert "| ❌ | `bad<b>` | 4 | 7 |" in text and "| ✅ | `ok` | 4 | – |" in text and "| ⏸️ | `later` |" in text
    assert "chaosckpt run --scenario kill9-mid-save -p save=2 -p fraction=0.25 -- train.py" in text
    assert len(text) < 4000


def test_html_is_one_self_contained_page_with_a_plot_per_trial_that_ran(suite_dir):
    page = html.render(stored.load(suite_dir))
    assert page.count("<svg") == 2
    assert "<script" not in page.replace("&lt;script&gt;", "")  # the headline's text is escaped, never markup
    assert "bad&lt;b&gt;" in page
    assert not [u for u in ("src=\"http", "href=\"http", "@import", "url(http") if u in page]
    assert "the fault hit save 2 after 50 bytes (write 2), at step 8, writing ckpt.pt" in page  # counted in the save
    assert "the fault hit save 2, at step 8, 50 bytes into ckpt.pt (its write 2)" in page  # a fraction, in one file
    assert "rng-not-restored" in page and "first divergent step" in page


def test_the_report_command_writes_the_formats_asked_for(suite_dir, tmp_path):
    res = run_chaosckpt(["report", str(suite_dir), "--html", "r.html", "--junit", "j.xml", "--markdown", "s.md"], cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # written whatever the verdicts, then the failed trial's status
    assert [(tmp_path / n).stat().st_size > 0 for n in ("r.html", "j.xml", "s.md")] == [True, True, True]
    missing = run_chaosckpt(["report", str(tmp_path / "nothing")], cwd=tmp_path)
    assert missing.returncode == 2 and "holds no chaosckpt results" in missing.stderr


FIGURES = """[...document.querySelectorAll('figure svg')].map(svg => {
  const box = svg.getBoundingClientRect();
  return {width: box.width, height: box.height, paths: svg.querySelectorAll('path').length};
}).concat([{anchor: document.getElementById('bad<b>') !== null}])"""


def colour_pixels(png: bytes, rgb) -> int:
    """How many pixels of the screenshot are within a small distance of ``rgb``."""
    import io

    import numpy
    from matplotlib import image

    pixels = image.imread(io.BytesIO(png), format="png")[:, :, :3] * 255
    return int((numpy.abs(pixels - numpy.array(rgb)).max(axis=2) < 24).sum())


@pytest.mark.skipif(not browser.CHROMIUM, reason="no chromium on this machine to render the HTML report in "
                    "(Debian: apt-get install chromium; .ci/run installs it)")
def test_the_html_report_renders_offline_in_headless_chromium_without_errors_with_its_plots_drawn(suite_dir, tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text('<p>x</p><img src="http://example.com/x.png"><script>console.error("boom"); null.x;</script>')
    control = browser.render(broken, "1", tmp_path / "profile-control")
    assert sorted(p.split(":")[0] for p in control.problems) == ["console.error", "failed to load", "log", "uncaught"], control.problems
    assert control.network == ["http://example.com/x.png"]  # the checks below can fail

    page = tmp_path / "report.html"
    html.write(stored.load(suite_dir), page)
    shown = browser.render(page, FIGURES, tmp_path / "profile")

    assert shown.problems == [] and shown.network == []
    *figures, anchor = shown.value
    assert anchor == {"anchor": True} and len(figures) == 2
    assert all(f["width"] > 400 and f["height"] > 150 and f["paths"] > 20 for f in figures), figures
    # drawn, not just present: the faulted run's orange, the resumed run's green, the fault's vermilion
    for rgb in ((0xE6, 0x9F, 0x00), (0x00, 0x9E, 0x73), (0xD5, 0x5E, 0x00)):
        assert colour_pixels(shown.screenshot, rgb) > 100, rgb

def test_a_faulted_run_the_suite_shared_counts_once_in_the_totals_and_in_no_trial_alone(suite_dir):
    prefix = suite_dir / "prefixes" / "save-2" / "faulted"
    prefix.mkdir(parents=True)
    (suite_dir / "trials" / "ok" / "faulted" / "events").rename(prefix / "events")
    shutil.rmtree(suite_dir / "trials" / "bad<b>" / "faulted")
    for name in ("ok", "bad<b>"):
        path = suite_dir / "trials" / name / "result.json"
        doc = json.loads(path.read_text())
        doc["trials"][0]["runs"][1].update(shared=True, duration_s=5.0, events=str(prefix / "events"))
        path.write_text(json.dumps(doc))
    results = stored.load(suite_dir)

    assert [len(t.trainer("faulted").steps) for t in results.trials[:2]] == [8, 8]  # read where the suite ran it

    assert [t.own_time for t in results.trials] == [3.0, 3.0, 0.0]
    assert (results.runs(), results.run_time()) == (5, 11.0)  # 2 + 2 runs of their own, and the shared one
    root = ET.fromstring(junit.render(results))
    assert root.get("time") == root.find("testsuite").get("time") == "11.000"
    assert [c.get("time") for c in root.iter("testcase")] == ["3.000", "3.000", "0.000"]
    page = html.render(results)
    assert "5 runs, 11 s of run time" in page and "faulted (shared by the suite): python train.py" in page


GOLD = Path(__file__).parent / "gold"
"""Expected reports, checked in: a change to what a report says shows as a diff of these files. After an intended
change, rewrite them with ``CHAOSCKPT_REGOLD=1 python3 -m pytest tests/test_reports.py -k gold`` and review the diff."""


def matches_gold(name: str, text: str) -> None:
    path = GOLD / name
    if os.environ.get("CHAOSCKPT_REGOLD") == "1":
        path.write_text(text)
    assert text == path.read_text(), (f"the report differs from tests/gold/{name}; if the change is meant, rerun "
                                      "with CHAOSCKPT_REGOLD=1 and review the diff")


@pytest.fixture
def gold_results(tmp_path: Path) -> stored.Results:
    """The checked-in result.json of a sweep and a kill, in a run folder, with its time fixed."""
    folder = tmp_path / "20261130-020000-kill9-mid-save"
    folder.mkdir()
    shutil.copy(GOLD / "sweep-result.json", folder / "result.json")
    results = stored.load(folder)
    results.created = "2026-11-30T02:00:00+00:00"
    return results


@pytest.mark.parametrize("name, render", [("sweep.md", markdown.render), ("sweep.html", html.render)])
def test_the_markdown_and_html_reports_match_their_gold_files(gold_results, tmp_path, name, render):
    matches_gold(name, render(gold_results).replace(str(tmp_path), "/tmp/gold"))


def test_a_sweep_report_tables_its_crash_points_and_what_its_resumes_found(gold_results):
    text, page = markdown.render(gold_results), html.render(gold_results)
    assert "### Crash points of `power-loss`" in text
    assert "| 2 | `write 2048 B to ckpt/last.pt` | ckpt/last.pt 2048 B unreadable | crashed: the checkpoint file is truncated |" in text
    assert "| 4 | `fsync ckpt/last.pt` | ckpt/last.pt 4096 B loads | load check only |" in text
    found = "3 disk states resumed: last-good (step 4) in 1; scratch (step 0) in 1; crashed: the checkpoint file is truncated in 1"
    assert found in text and found in page
    table = page.split('class="overview crash-points"')[1].split("</table>")[0]
    assert table.count("<tr><td>") == 5 and "at most 8 (the worst resumed disk state)" in page
    # a fault whose step and file the agent did not report: left out of the timeline, not printed as None
    assert "writing None" not in page and "step None" not in page and "the fault hit save 2</li>" in page


def test_a_combined_report_heads_its_page_with_its_folders_and_its_trials_counted(suite_dir, tmp_path):
    first, second = run_folder(tmp_path / "a", "passed"), run_folder(tmp_path / "b")
    combined = stored.combine([suite_dir, first, second])
    assert markdown.render(combined).startswith(
        "## chaosckpt report of 3 folders (5 trials): 2 passed, 2 failed, 1 not run\n")
    assert "<title>chaosckpt report of 3 folders (5 trials): 2 passed, 2 failed, 1 not run</title>" in html.render(combined)


def test_a_skipped_trial_shows_its_reason_in_every_report(suite_dir):
    data = json.loads((suite_dir / "suite.json").read_text())
    data["trials"].append({"id": "node-loss", "scenario": "node-loss", "params": {}, "sweep": False,
                           "skipped": "node-loss needs a job on 2 or more machines and this one runs on 1"})
    (suite_dir / "suite.json").write_text(json.dumps(data))
    results = stored.load(suite_dir)
    assert results.counts()["skipped"] == 1 and results.summary() == "1 passed, 1 failed, 1 skipped, 1 not run"
    case = ET.fromstring(junit.render(results)).find(".//testcase[@name='node-loss']")
    assert case.find("skipped").get("message") == "skipped: node-loss needs a job on 2 or more machines and this one runs on 1"
    assert "| ⏭️ | `node-loss` | – | – | skipped: node-loss needs a job on 2 or more machines" in markdown.render(results)
    assert "<p>Skipped: node-loss needs a job on 2 or more machines and this one runs on 1.</p>" in html.render(results)


HOSTILE = "# Forged [click](https://evil.example) <img src=x onerror=alert(1)> | a | b | ```` ~~struck~~ &amp; *em*"
"""What a job can put in its command, its stderr and so in a headline: markup of every kind a summary renders."""


def hostile_suite(suite_dir):
    """The stored suite, its job's command and its failed trial's headline, finding and commands made ``HOSTILE``."""
    plan = json.loads((suite_dir / "suite.json").read_text())
    plan["command"] = plan["args"] = ["python", "train.py", HOSTILE]
    (suite_dir / "suite.json").write_text(json.dumps(plan))
    verdict = suite_dir / "trials" / "bad<b>" / "result.json"
    doc = json.loads(verdict.read_text())
    trial = doc["trials"][0]
    trial["headline"] = trial["findings"][0]["message"] = HOSTILE
    for run in trial["runs"]:
        run["command"] = ["python", "train.py", HOSTILE]
    verdict.write_text(json.dumps(doc))
    return stored.load(suite_dir)


def test_job_text_opens_no_markup_in_the_markdown_summary(suite_dir):
    markdown_it = pytest.importorskip("markdown_it")
    page = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(
        markdown.render(hostile_suite(suite_dir)))
    assert re.findall(r"<(h\d|a|img|del|em)\b", page) == ["h2", "h3"]  # the summary's own headings, nothing else
    rows = re.findall(r"<tr>(.*?)</tr>", page, re.S)
    assert [row.count("<td") for row in rows[1:]] == [5, 5, 5]
    assert page.count("<pre>") == 1 and HOSTILE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in page
    shown = page.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
    assert shown.count(HOSTILE) >= 4  # the command, the headline, the finding, the replay: each shown as written


def test_job_text_in_junit_is_escaped_and_valid_xml(suite_dir, tmp_path):
    results = hostile_suite(suite_dir)
    results.trials[1].trial.headline = "FAILED \x1b[31mred\x00 \u202e<b>&"
    path = tmp_path / "j.xml"
    junit.write(results, path)
    root = ET.fromstring(path.read_text())  # XML may hold neither NUL nor ESC: raw, the file is no XML at all
    failure = next(c for c in root.iter("testcase") if c.get("name") == "bad<b>").find("failure")
    assert failure.get("message") == "FAILED \\x1b[31mred\\x00 \\u202e<b>&"
    assert HOSTILE in failure.text


@pytest.mark.parametrize("fail_on, expected", [("status", 1), ("failed", 1), ("inconclusive", 1), ("error", 1),
                                               ("never", 0)])
def test_the_report_exits_as_the_run_did_or_as_fail_on_asks(suite_dir, tmp_path, fail_on, expected):
    res = run_chaosckpt(["report", str(suite_dir), "--markdown", "s.md", "--fail-on", fail_on], cwd=tmp_path)
    assert res.returncode == expected, res.stderr
    assert (tmp_path / "s.md").read_text().count("kill9-mid-save") >= 2


def test_fail_on_a_severity_fails_a_passing_trial_on_a_finding_of_it_or_worse(tmp_path):
    warning = {"kind": "no-emergency-save", "message": "the job saved nothing after the SIGTERM", "severity": "warning"}
    passed = run_folder(tmp_path / "w", "passed", findings=[warning])
    ignored = run_folder(tmp_path / "i", "passed", findings=[{**warning, "ignored": True}])
    inconclusive = run_folder(tmp_path / "n", "inconclusive")
    for folder, fail_on, expected in ((passed, "status", 0), (passed, "error", 0), (passed, "warning", 1),
                                      (passed, "note", 1), (ignored, "note", 0), (inconclusive, "status", 4),
                                      (inconclusive, "failed", 0), (inconclusive, "inconclusive", 1)):
        res = run_chaosckpt(["report", str(folder), "--fail-on", fail_on], cwd=tmp_path)
        assert (res.returncode, res.stderr) == (expected, ""), (folder, fail_on)
    bad = run_chaosckpt(["report", str(passed), "--fail-on", "warnings"], cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
