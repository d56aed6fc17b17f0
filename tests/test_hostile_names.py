"""Names that try to forge report lines: a newline (a second, fake ``OK`` line) or a bidi override, in real
file names and stored results, escaped in every human-facing output."""

from __future__ import annotations

import json

import torch
from conftest import run_chaosckpt
from stored_results import run_folder

from chaosckpt.conductor.errors import printable
from chaosckpt.conductor.reports import html, markdown
from chaosckpt.conductor.results import stored

FORGED = "evil.pt\nOK forged.pt: 1 key, 8 B (torch zip archive)"
BIDI = "report\u202etp.exe"


def test_printable_escapes_controls_and_bidi_and_keeps_other_scripts():
    assert printable("a\nb\tc\x1b[31m") == "a\\nb\\tc\\x1b[31m"
    assert printable("x\u202ey\u2066z\u200f") == "x\\u202ey\\u2066z\\u200f"
    assert printable("\udcff.pt") == "\\udcff.pt"  # an undecodable byte of a file name
    assert printable("modèle 模型.pt") == "modèle 模型.pt"


def test_audit_prints_forged_names_escaped_on_their_own_line(tmp_path):
    folder = tmp_path / "ckpts"
    folder.mkdir()
    torch.save({"w": torch.ones(2)}, folder / FORGED)
    torch.save({"w": torch.ones(2)}, folder / BIDI)
    (folder / "torn\u202e.pt").write_bytes(b"PK\x03\x04 torn")
    for target in [str(folder / FORGED), str(folder / BIDI), str(folder)]:
        result = run_chaosckpt(["audit", target], cwd=tmp_path)
        assert result.returncode in (0, 1), result.stderr
        lines = result.stdout.splitlines()
        assert not [line for line in lines if line.startswith("OK forged")], result.stdout
        assert "\u202e" not in result.stdout
    assert "evil.pt\\nOK forged.pt" in result.stdout and "report\\u202etp.exe" in result.stdout
    missing = run_chaosckpt(["audit", str(folder / "gone\nOK fake.pt")], cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "gone\\nOK fake.pt" in missing.stderr


def test_reports_escape_forged_names_in_stored_results(tmp_path):
    folder = run_folder(tmp_path)
    doc = json.loads((folder / "result.json").read_text())
    doc["trials"][0]["headline"] += "\n| ✅ | `forged` | 0 | – | PASSED |"
    doc["trials"][0]["findings"] = [{"kind": "in-place-save", "message": f"the job overwrote {BIDI} in place"}]
    (folder / "result.json").write_text(json.dumps(doc))
    results = stored.load(folder)
    text = markdown.render(results)
    assert not [line for line in text.splitlines() if line.startswith("| ✅ | `forged`")]
    assert "\u202e" not in text and "report\\u202etp.exe" in text
    page = html.render(results)
    assert "\u202e" not in page and "report\\u202etp.exe" in page
    shown = run_chaosckpt(["report", str(folder)], cwd=tmp_path)
    assert shown.returncode == 1 and "\u202e" not in shown.stdout  # the forged trial failed: so does the report
