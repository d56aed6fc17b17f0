"""The ``chaosckpt`` command line."""

from __future__ import annotations

import errno
import os
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import List, Optional

import click

from chaosckpt import __version__
from chaosckpt.conductor import config as configs
from chaosckpt.conductor.errors import EXIT_CODES, ExitCode, UsageError, printable
from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.runs import diskspace, leftovers, signals


@click.group(epilog=EXIT_CODES, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="chaosckpt")
def cli() -> None:
    """Break a PyTorch training job the way production does, resume it, and score the recovery."""


def _register() -> None:
    from chaosckpt.conductor.commands import (audit, clean, history, init, node, report, repro, run, scenarios,
                                              suite)

    for module in (run, scenarios, suite, report, history, audit, clean, node, init, repro):
        cli.add_command(module.command)


_register()


def _crash_report(exc: BaseException) -> Path:
    """The report of an internal error, in the results folder of the invocation (else ./chaosckpt-results when
    there is one), so it is found, and cleaned, with the results; in the temporary folder when that cannot be
    written (a full disk)."""
    default = configs.SuiteConfig().results
    name = f"chaosckpt-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    body = (
        f"chaosckpt {__version__} internal error\n"
        f"command: {shlex.join(sys.argv)}\npython: {sys.version}\n\n"
        + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    )
    folders = [leftovers.owned() or (default if default.is_dir() else None), Path(tempfile.gettempdir())]
    for directory in [f for f in folders if f is not None]:
        try:
            atomic.write_text(directory / name, body)
            return directory / name
        except OSError:
            continue
    raise exc


def _full_disk(exc: OSError, argv: List[str]) -> None:
    """Exit on ENOSPC naming the disk that is full: the results' (exit 4, no verdict could be established), or
    the one under standard output, where what was asked for could not be written (exit 4 for ``run`` and
    ``suite``, whose verdicts are in their results folder, else 2)."""
    if isinstance(exc.filename, str):
        where = Path(exc.filename).parent
        click.echo(f"chaosckpt: inconclusive: {diskspace.describe(where, what='chaosckpt could not write its results')}",
                   err=True)
        sys.exit(int(ExitCode.INCONCLUSIVE))
    output = Path(os.readlink("/proc/self/fd/1")) if os.path.islink("/proc/self/fd/1") else Path.cwd()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what is left in stdout's buffer would fail again at exit
    command = next((a for a in argv if not a.startswith("-")), "")
    click.echo(printable(f"chaosckpt: error: cannot write the output to {output}: the disk holding it (mounted at "
                         f"{diskspace.mount_point(output.parent)}) is full; free some space or send the output "
                         "elsewhere"), err=True)
    sys.exit(int(ExitCode.INCONCLUSIVE if command in ("run", "suite") else ExitCode.USAGE))


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point: usage errors in one line, internal errors as a crash report, never a bare traceback."""
    signals.install()
    try:
        cli.main(args=argv, prog_name="chaosckpt", standalone_mode=False)
    except UsageError as exc:
        click.echo(printable(f"chaosckpt: error: {exc}"), err=True)
        sys.exit(int(ExitCode.USAGE))
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else str(exc))
        sys.exit(0)
    except click.ClickException as exc:
        hint = f" (see chaosckpt {exc.ctx.info_name} --help)" if getattr(exc, "ctx", None) and exc.ctx.info_name != "chaosckpt" else " (see chaosckpt --help)"
        click.echo(printable(f"chaosckpt: error: {exc.format_message()}{hint}"), err=True)
        sys.exit(int(ExitCode.USAGE))
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        cause = exc.__cause__ if isinstance(exc.__cause__, KeyboardInterrupt) else exc
        click.echo(signals.describe(cause), err=True)
        sys.exit(signals.exit_status(cause))
    except SystemExit:
        raise
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            _full_disk(exc, argv if argv is not None else sys.argv[1:])
        path = _crash_report(exc)
        click.echo(f"chaosckpt: internal error ({type(exc).__name__}: {exc}); crash report: {path}", err=True)
        sys.exit(int(ExitCode.INTERNAL))
    finally:
        leftovers.release_all()
