"""Command line: parses arguments and calls into the package; nothing else lives here.

Every command is made from typed options: `dlbench run <workload>` from the workload's
options and the general spec fields it takes, the other commands from their request
classes (commands/results.py, commands/data.py, ...). So a value is checked in one place
however it arrives, and a new option or workload needs no change here.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from dataclasses import MISSING
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperCommand, TyperGroup

try:  # newer typer releases carry their own copy of click
    from typer._click import exceptions as clicks
except ImportError:  # pragma: no cover - typer with click installed beside it
    from click import exceptions as clicks

from dlbench import workloads
from dlbench.errors import UserError
from dlbench.commands import data, doctor, models, report, results, system
from dlbench.commands.suite import SuiteRequest, suite_command
from dlbench.launch.view import Terminal
from dlbench.options import Field, Options, fields_of
from dlbench.results.store import GLOBAL_DB
from dlbench.units import suggest

view = Terminal()
FLAG = ""  # a flag takes no value: newer typer would show it a type, "<bool>", as if it took one


def _prose(text: str | None) -> str:
    """`text` with each paragraph on one line. rich keeps a docstring's single line breaks, so the
    help would break sentences wherever the source did, and again where the terminal wraps them;
    a paragraph that starts with \\b keeps its lines (click's mark for a list or a table)."""
    paragraphs = inspect.cleandoc(text or "").split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


def _first_sentence(text: str | None) -> str:
    """The first sentence of `text`: a command's line in its group's list, the rest in its own --help."""
    return re.split(r"(?<=\.)\s+(?=[A-Z])", _prose(text).split("\n\n")[0], maxsplit=1)[0]


class _FlagHelp:
    """--help shown as the flag it is: typer gives the option it adds itself a type, "<bool>"."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None:
            option.metavar = FLAG
        return option


class _Command(_FlagHelp, TyperCommand):
    pass


class _Commands(_FlagHelp, TyperGroup):
    """A group whose unknown command is a user error naming the close ones, as for options and
    models. typer's own suggestion looks only at commands made up front, never at `run`'s
    workloads, which are made when asked for."""

    noun = "command"

    def resolve_command(self, ctx, args: list[str]):
        name = args[0] if args else ""
        known = self.list_commands(ctx)
        if name and not name.startswith("-") and name not in known and not ctx.resilient_parsing:
            raise UserError(f"unknown {self.noun} {name!r}{suggest(name, known)}; "
                            f"`{ctx.command_path} --help` lists them")
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_Commands,
    # the first paragraph is the headline; rich shows the rest below it, dimmed
    help="Deep learning benchmarks for GPU machines.\n\nWith no command, runs the default suite (`quick` on a "
         "GPU; without one `smoke`, a short CPU check), stores the results and prints the report.",
    no_args_is_help=False, add_completion=False, pretty_exceptions_enable=False,
)


def _version(show: bool) -> None:
    if show:
        from dlbench import __version__

        view.text(f"dlbench {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _default(ctx: typer.Context,
             db: Optional[Path] = typer.Option(None, "--db", help="Result store (SQLite) for this command and every "
                                               "command after it in this call. Default: $DLBENCH_DB, else a "
                                               "./dlbench.db that exists, else the store every run on this "
                                               "machine shares (~/.local/share/dlbench/dlbench.db on Linux)."),
             version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, metavar=FLAG,
                                          help="Show the version and exit.")) -> None:
    if db is not None:  # `dlbench --db X results`: every command and every process it starts uses X
        os.environ["DLBENCH_DB"] = os.environ[GLOBAL_DB] = str(db)
    if ctx.invoked_subcommand is None:
        raise typer.Exit(suite_command(SuiteRequest(), view))


class _RunCommands(_Commands):
    """`dlbench run`'s sub-commands, one per workload, made when asked for: building one imports
    its workload (and torch), which other commands need not wait for."""

    noun = "workload"

    def list_commands(self, ctx) -> list[str]:
        return workloads.names()

    def get_command(self, ctx, name: str):
        if name not in workloads.names():
            return None
        return typer.main.get_command(_run_app(workloads.get(name)))


run_app = typer.Typer(cls=_RunCommands, help="Run one benchmark and store its result.", no_args_is_help=True)
app.add_typer(run_app, name="run")

BATCH_PLANS = (" --batch also takes a list 1,2,4 (one result each), 'sweep' (powers of two until memory runs "
               "out) or 'auto' (the largest batch that fits).")


def _run_app(workload: workloads.Workload) -> typer.Typer:
    """A one-command app whose options are the workload's general fields and typed options."""
    from dlbench.commands.run import RunExtras
    from dlbench.spec import BenchmarkSpec

    general = [f for f in fields_of(BenchmarkSpec) if f.name in workload.general]
    shown = {"max_batch": workload.batch_plans, "retune": workload.batch_plans or workload.tuning is not None}
    extras = [f for f in RunExtras.fields() if shown.get(f.name, True)]
    params = [_workload_parameter(f, workload) for f in general + workload.options.fields()]
    params += [_parameter(f) for f in extras]
    # --output has one meaning, the prediction `run volume` writes; elsewhere it once named the results file
    old_output = "output" not in workload.options.names()
    if old_output:
        params.append(inspect.Parameter("output", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                                        default=typer.Option(None, "--output", hidden=True)))

    def command(**values) -> None:
        from dlbench.commands.run import run_command

        if old_output and (path := values.pop("output")) is not None:
            raise UserError(renamed_output(path, workload.name))
        given = {k: v for k, v in values.items() if v is not None}
        raise typer.Exit(run_command(workload, given, view=view))

    command.__signature__ = inspect.Signature(params)
    sub = typer.Typer(add_completion=False)
    sub.command(workload.name, cls=_Command, help=_prose(workload.help))(command)
    return sub


def renamed_output(path: str, workload: str) -> str:
    """The line for `--output FILE` where it once meant the results file."""
    return (f"--output is the prediction of `dlbench run volume` only; `run {workload}` writes its results to a "
            f"file with --results-file: give --results-file {path}")


def _workload_parameter(field: Field, workload: workloads.Workload) -> inspect.Parameter:
    if field.name == "batch" and workload.batch_plans:  # a list, 'sweep' or 'auto': parsed by the launcher
        return _parameter(field, workload.defaults.get("batch"), field.help() + BATCH_PLANS, kind=str)
    return _parameter(field, workload.defaults.get(field.name, field.default))


def _parameter(field: Field, default=MISSING, text: str | None = None, kind: type | None = None) -> inspect.Parameter:
    """The command-line parameter of a declared field (typed checks happen when the request is made)."""
    default = field.default if default is MISSING else default
    kind = kind or (str if field.kind is tuple else list[str] if field.kind is list else field.kind)
    if isinstance(default, tuple):
        default = "x".join(map(str, default))
    annotation = Optional[kind] if field.optional or default is None else kind
    if field.meta.argument:
        info = typer.Argument(... if default is MISSING else default, help=text or field.help(),
                              metavar=field.flag, show_default=default is not MISSING)
    else:
        flags = [f"{field.flag}/--no-{field.flag[2:]}" if kind is bool and default else field.flag]
        info = typer.Option(default, *flags, *filter(None, [field.meta.short]), help=text or field.help(),
                            metavar=FLAG if kind is bool else None)
    return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=info)


def _command(group: typer.Typer, name: str, request: type[Options], handler) -> None:
    """A command whose parameters are `request`'s fields; `handler(request, view)` gets them checked
    and returns the exit status (None for 0)."""

    def command(**values) -> None:
        raise typer.Exit(handler(request(**values), view) or 0)

    command.__signature__ = inspect.Signature([_parameter(f) for f in request.fields()])
    group.command(name, cls=_Command, help=_prose(request.__doc__),
                  short_help=_first_sentence(request.__doc__))(command)


data_app = typer.Typer(cls=_Commands, help="Write synthetic datasets to benchmark real input pipelines anywhere.",
                       no_args_is_help=True)
app.add_typer(data_app, name="data")
_command(data_app, "images", data.ImagesRequest, data.images)
_command(data_app, "volume", data.VolumeRequest, data.volume)
_command(data_app, "seg", data.SegRequest, data.seg)
_command(app, "suite", SuiteRequest, suite_command)
_command(app, "report", report.ReportRequest, report.report)
_command(app, "compare", report.CompareRequest, report.compare)
_command(app, "results", results.ResultsRequest, results.results)
_command(app, "export", results.ExportRequest, results.export)
_command(app, "import", results.ImportRequest, results.import_)


_command(app, "models", models.ModelsRequest, models.models)
_command(app, "system", system.SystemRequest, system.system_command)
_command(app, "doctor", doctor.DoctorRequest, doctor.doctor)


def main() -> None:
    from dlbench import plugins
    from dlbench.launch import interrupts
    from dlbench.launch.environment import prepare

    interrupts.install()
    prepare()
    with interrupts.answered(view.message):  # Ctrl-C anywhere, an error's line included: one line, exit 130
        try:
            plugins.load()
            code = app(standalone_mode=False)
        except UserError as error:
            code = view.error(str(error))
        except getattr(clicks, "NoArgsIsHelpError", ()) as error:
            error.show()  # the help of the command given without arguments
            code = error.exit_code
        except clicks.UsageError as error:  # a flag that does not exist, a number that is not one
            hint = f" (see {error.ctx.command_path} --help)" if error.ctx else ""
            code = view.error(error.format_message() + hint)
        except typer.Abort:
            code = 130
    sys.exit(code or 0)
