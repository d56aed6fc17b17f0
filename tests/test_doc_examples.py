"""The documentation's examples are run, so that they cannot drift from the tool (issue 33): every ``chaosckpt``
command line of the README and ``docs/`` is parsed by the command it names (options, scenario, ``-p`` keys), every
configuration block is read as chaosckpt reads a configuration, the Python API's examples call it with keywords it
takes, and the outputs the getting-started page shows are what the commands print, volatile parts normalised."""

from __future__ import annotations

import ast
import inspect
import itertools
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import click
import pytest

from chaosckpt.conductor import cli, config, scenario as scenarios
from chaosckpt.conductor.params import parse_param

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = sorted([README, *(REPO / "docs").rglob("*.md")])
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*(\.\w+)?$|<[^>]+>|\.\.\.")
"""A word of a command standing for the reader's own value (``RESULTS``, ``<folder>``, ``...``)."""


def _blocks(page: Path, *languages: str) -> Iterator[str]:
    for lang, body in BLOCK.findall(page.read_text()):
        if lang in languages:
            yield body


def _command_lines() -> Iterator[Tuple[str, str]]:
    """(where, line) of each ``chaosckpt`` invocation in a shell or plain block: ``$ `` prompts, a leading
    ``VAR=value``, comments and a shell's ``&&``, ``;`` and ``|`` taken apart."""
    for page in PAGES:
        for body in _blocks(page, "", "bash", "sh", "console", "yaml"):
            for raw in body.replace("\\\n", " ").splitlines():
                line = raw.strip().removeprefix("$ ").removeprefix("- run: ").removeprefix("run: ")
                for part in re.split(r"&&|;|\|\|?", line):
                    words = part.split("#", 1)[0].split()
                    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                        words.pop(0)
                    if words[:1] == ["chaosckpt"] and len(words) > 1:
                        yield f"{page.relative_to(REPO)}: {raw.strip()}", " ".join(words)


COMMANDS = sorted(set(_command_lines()))


def _parse(line: str) -> click.Context:
    """The context of the subcommand a line names, parsed; click raises on an unknown option or a bad value."""
    name, *args = shlex.split(line)[1:]
    parent = cli.cli.make_context("chaosckpt", [name])
    command = cli.cli.get_command(parent, name)
    assert command is not None, f"chaosckpt has no command {name}"
    return command.make_context(name, args, parent=parent)


def test_a_command_line_with_a_wrong_option_or_parameter_is_refused():
    with pytest.raises(click.UsageError):
        _parse("chaosckpt run train.py --results out -s kill9-mid-save")
    ctx = _parse("chaosckpt run train.py -s kill9-mid-save -p sav=3")
    with pytest.raises(Exception, match="sav"):
        scenarios.load(ctx.params["scenario_name"], dict(parse_param(p) for p in ctx.params["params"]))


def test_the_docs_show_commands_to_check():
    assert len(COMMANDS) > 60, f"only {len(COMMANDS)} chaosckpt command lines found in the docs"


@pytest.mark.parametrize("where, line", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_command_line_of_the_docs_is_one_chaosckpt_takes(where, line):
    if any(PLACEHOLDER.fullmatch(word) for word in shlex.split(line)[1:2]):
        pytest.skip("a placeholder, not a command")
    ctx = _parse(line)
    scenario = ctx.params.get("scenario_name")
    params = dict(parse_param(p) for p in ctx.params.get("params") or ())
    if scenario and not scenario.endswith(".toml"):
        scenarios.load(scenario, params)


def _tomls() -> List[Tuple[str, str]]:
    found = []
    for page in PAGES:
        for number, body in enumerate(_blocks(page, "toml"), 1):
            found.append((f"{page.relative_to(REPO)} #{number}", body))
    return found


@pytest.mark.parametrize("where, text", _tomls(), ids=[w for w, _ in _tomls()])
def test_every_configuration_the_docs_show_is_read_as_written(tmp_path, where, text):
    name = "pyproject.toml" if "[tool.chaosckpt" in text else "chaosckpt.toml"
    (tmp_path / name).write_text(text)
    (tmp_path / "train.py").write_text("print('a job')\n")
    conf = config.load_file(tmp_path / name)
    assert conf.source is not None


def _api_calls() -> List[Tuple[str, ast.Call]]:
    calls = []
    for body in _blocks(REPO / "docs" / "python-api.md", "python"):
        tree = ast.parse(body)
        calls += [(ast.unparse(node)[:60], node) for node in ast.walk(tree) if isinstance(node, ast.Call)
                  and ast.unparse(node.func) == "chaosckpt.run"]
    return calls


def test_the_python_api_examples_call_it_with_keywords_it_takes():
    import chaosckpt
    from chaosckpt.conductor.api import RunKeywords

    calls = _api_calls()
    assert calls, "the Python API page shows chaosckpt.run"
    known = set(inspect.signature(chaosckpt.run).parameters) | set(RunKeywords.__annotations__)
    for text, call in calls:
        unknown = [k.arg for k in call.keywords if k.arg not in known]
        assert not unknown, f"{text}...: chaosckpt.run takes no {unknown}"
    table = re.findall(r"^\| `(\w+)` \|", (REPO / "docs" / "python-api.md").read_text(), re.M)
    assert set(table) <= known | {"job"}, f"the page lists arguments chaosckpt.run lacks: {set(table) - known}"


# The sessions the docs show, run as shown (from a copy of examples/ and tests/jobs/): the stdout lines shown and
# the exit status must be what the command prints; the stderr lines by their start, since they name this machine's
# interpreter, folders and confinement.
VOLATILE = [
    (re.compile(r"\d{8}-\d{6}"), "TIMESTAMP"),
    (re.compile(r" on /\S+ "), " on PYTHON "),
    (re.compile(r"\bop +\d+"), "op N"),
    (re.compile(r"sandbox of .*$"), "sandbox of ..."),
]


def _normal(line: str) -> str:
    for pattern, text in VOLATILE:
        line = pattern.sub(text, line)
    return line


STATUS = {"PASSED": 0, "FAILED": 1, "INCONCLUSIVE": 4}


def _sessions() -> Dict[str, List[Tuple[List[str], int]]]:
    """Each ``$ chaosckpt run`` a block of the README or docs/ shows with what it printed: the command, then each
    distinct way a page shows it (the lines, the exit status: a ``$ echo $?``'s, else its verdict's). A page may
    show fewer lines than were printed (the verdict alone)."""
    found: Dict[str, List[Tuple[List[str], int]]] = {}
    for page in PAGES:
        for body in _blocks(page, ""):
            lines = body.splitlines()
            if len(lines) < 2 or not lines[0].startswith("$ chaosckpt run "):
                continue
            shown = list(itertools.takewhile(lambda line: not line.startswith("$ "), lines[1:]))
            verdict = next(line.split()[0] for line in shown if not line.startswith("chaosckpt: "))
            status = int(lines[-1]) if lines[-2:-1] == ["$ echo $?"] else STATUS[verdict]
            variants = found.setdefault(lines[0][2:], [])
            variants += [(shown, status)] if (shown, status) not in variants else []
    return found


def test_the_docs_show_sessions_to_run():
    assert len(_sessions()) == 4, list(_sessions())


@pytest.mark.e2e
@pytest.mark.parametrize("command", sorted(_sessions()))
def test_the_sessions_the_docs_show_are_what_the_commands_print(tmp_path, command):
    project = tmp_path / "chaosckpt"
    shutil.copytree(REPO / "examples", project / "examples")
    shutil.copytree(REPO / "tests" / "jobs", project / "tests" / "jobs")
    done = subprocess.run([sys.executable, "-m", "chaosckpt", *shlex.split(command)[1:]], cwd=project,
                          capture_output=True, text=True, timeout=600)
    printed = [_normal(line) for line in done.stdout.splitlines()]
    said = [_normal(line)[:40] for line in done.stderr.splitlines() if line.startswith("chaosckpt: ")]
    for shown, status in _sessions()[command]:
        assert done.returncode == status, done.stdout + done.stderr
        out = [_normal(line) for line in shown if not line.startswith("chaosckpt: ")]
        assert printed[:len(out)] == out, done.stdout
        err = [_normal(line)[:40] for line in shown if line.startswith("chaosckpt: ")]
        assert said[:len(err)] == err, done.stderr
