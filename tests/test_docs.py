"""The documentation: the MkDocs site builds with ``--strict`` (no broken link, anchor or nav entry), and
README.md stays a front page: short, with the two commands, linking only to pages of the site that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
INSTALL_AND_RUN = ("pip install torch==2.13.0 && pip install -e . && "
                   "chaosckpt run examples/naive_train.py --scenario kill9-mid-save")
INSTALL_AND_TEST = "pip install -e '.[test,docs]' && python -m pytest"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _mkdocs_missing() -> str | None:
    try:
        import mkdocs  # noqa: F401
        import material  # noqa: F401
    except ImportError as exc:
        return f"the docs need mkdocs and mkdocs-material ({exc.name} is not installed): pip install -e '.[docs]'"
    return None


def test_the_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: any warning (a link to a missing page or anchor, a page left out of the nav)
    fails the build."""
    if not (REPO / "mkdocs.yml").is_file():
        pytest.skip("no mkdocs.yml here (an sdist carries no docs)")
    missing = _mkdocs_missing()
    if missing:
        pytest.skip(missing)
    site = tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                           cwd=REPO, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    assert (site / "index.html").is_file()
    assert (site / "findings" / "index.html").is_file()


def _commands(text: str) -> list[str]:
    """The lines of the README's fenced ``bash`` blocks."""
    return [line.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S) for line in block.splitlines()]


def test_the_readme_is_a_front_page_with_the_two_commands():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move the detail into docs/ and link to it"
    commands = _commands(text)
    assert INSTALL_AND_RUN in commands, "the command that installs chaosckpt and runs the first trial is missing"
    assert INSTALL_AND_TEST in commands, "the command that installs the test extra and runs the tests is missing"
    assert text.index(INSTALL_AND_RUN) < text.index(INSTALL_AND_TEST)
    script = INSTALL_AND_RUN.rsplit("chaosckpt run ", 1)[1].split()[0]
    assert (REPO / script).is_file(), f"the first trial runs {script}, which is not in the repository"


def test_the_readme_links_only_to_docs_pages_that_exist():
    links = LINK.findall(README.read_text())
    assert links, "the front page links to the docs"
    docs = (REPO / "docs").resolve()
    for target in links:
        path = target.split("#", 1)[0]
        assert "://" not in target and path.endswith(".md"), f"README links to {target}, not to a page of docs/"
        page = (REPO / path).resolve()
        assert docs in page.parents, f"README links to {target}, outside docs/"
        if docs.is_dir():
            assert page.is_file(), f"README links to {target}, which does not exist"
