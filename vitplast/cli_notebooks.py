"""The ``vitplast notebooks`` command: list, copy, run the notebook sequence, render a run as a
reading copy and compare what two runs printed (``vitplast.course.notebooks``,
``vitplast.course.reading_copy``, ``vitplast.course.run_diff``).

Building its parser imports no torch (``--help`` answers at once): the reading copy and the
comparison are imported with the module, the course runner (``notebooks``, which loads models)
by the actions that run or list notebooks.
"""

from __future__ import annotations

import ast
import sys

from vitplast.cli_files import command_group
from vitplast.course import reading_copy, run_diff  # no torch: the course runner (notebooks) has it


def add_parser(sub) -> None:
    """The ``notebooks`` subcommand and its actions, on the CLI's subparsers ``sub``."""
    nb_sub = command_group(sub, "notebooks", "run the notebook sequence headlessly (papermill)",
                           "The notebook sequence (package data, vitplast/notebooks/): list it, "
                           "copy it out, execute it with papermill under a profile, render an "
                           "executed run as static HTML, or compare two runs.")
    r = nb_sub.add_parser("run", help="execute the notebooks into runs/<timestamp>/",
                          description="Execute the notebooks with papermill, --jobs at a time, "
                          "into runs/<timestamp>-<profile>/ (figures into its figures/, status per "
                          "notebook in summary.csv, with where and why a failed one failed). "
                          "Names, profiles and parameter types are checked before any kernel "
                          "starts; Ctrl-C stops the run and records the notebook in flight as "
                          "interrupted.")
    r.add_argument("--profile", default="default", help="smoke | default | paper")
    r.add_argument("--only", nargs="*", default=None, help="notebook prefixes, e.g. 03 04")
    r.add_argument("-p", "--param", nargs=2, action="append", default=[],
                   metavar=("NAME", "VALUE"), help="override a parameter (VALUE parsed as "
                   "a Python literal when possible; its type must be the parameter's)")
    r.add_argument("--out", default=None, help="output folder (default runs/<timestamp>-<profile>)")
    r.add_argument("--jobs", type=int, default=2, help="notebooks run side by side (default "
                   "2; 1: one after the other); summary.csv keeps the notebooks' order")
    r.add_argument("--html", action="store_true", help="then render the run as static HTML "
                   "into its html/ (as `notebooks html`)")
    r.add_argument("--dry-run", action="store_true", help="check the names, the profile's "
                   "needs and the parameters, print what would run, and run nothing")
    nb_sub.add_parser("list", help="list the notebooks, their parameters and stores read",
                      description="List the notebooks: title and minutes, each parameter "
                      "(name, type, default), and each study store the notebook reads, with "
                      "the parameter that names another folder for it.")
    c = nb_sub.add_parser("copy", help="copy the notebooks into a folder (for JupyterLab)",
                          description="Copy the notebook sequence (and its README and "
                          "solutions) out of the installed package into DEST, to open and edit "
                          "in JupyterLab. Files already in DEST with the same content are fine; "
                          "if any holds other content (your edits), nothing is copied and the "
                          "command names them, unless --force.")
    c.add_argument("dest", metavar="DEST", help="folder to copy into (created if missing)")
    c.add_argument("--force", action="store_true", help="overwrite the files in DEST that "
                   "differ from the package's")
    h = nb_sub.add_parser("html", help="render an executed run as a static HTML site",
                          description="Render the executed notebooks of RUN_DIR (a folder "
                          "`notebooks run` wrote) as one static HTML site to read in a browser "
                          "without a kernel: index.html lists the notebooks in the course order "
                          "with their status; each page embeds its figures.")
    h.add_argument("run_dir", metavar="RUN_DIR", help="runs/<timestamp>-<profile>/")
    h.add_argument("--out", default=None, help="folder for the site (default RUN_DIR/html)")
    d = nb_sub.add_parser("diff", help="compare what two executed runs printed",
                          description="Compare the texts, tables and findings two executed runs "
                          "printed, cell by cell (not figures, stderr or timings): one line per "
                          "difference; exit 1 when there is any.")
    d.add_argument("run_a", metavar="RUN_A", help="a folder `notebooks run` wrote")
    d.add_argument("run_b", metavar="RUN_B", help="another one")


def command(args, parser, argv) -> int:
    """Do the ``notebooks`` action ``args.action``; bad input ends in ``parser.error``."""
    from vitplast.course import notebooks, parameters

    if args.action == "copy":
        try:
            copied = notebooks.copy_to(args.dest, force=args.force)
        except FileExistsError as err:
            parser.error(str(err))
        print(f"copied {len(copied)} files into {args.dest}: open them with `jupyter lab "
              f"{args.dest}`")
        return 0
    if args.action == "list":
        for name in notebooks.available():
            types = notebooks.notebook_parameter_types(name)
            title, minutes = notebooks.outline(name)
            print(f"{name}: {title} (about {minutes} minutes)")
            for key, value in notebooks.notebook_parameters(name).items():
                print(f"  {key}: {types[key]} = {value!r}")
            for store in parameters.reads_in_words(name):
                print(f"  reads {store}")
        return 0
    if args.action == "html":
        return _html(args.run_dir, args.out, parser)
    if args.action == "diff":
        try:
            found = run_diff.diff(args.run_a, args.run_b)
        except FileNotFoundError as err:
            parser.error(str(err))
        print("\n".join(found) or "the two runs printed the same texts, tables and findings")
        return 1 if found else 0
    return _run(args, parser)


def _run(args, parser) -> int:
    from vitplast.course import notebooks

    params = {k: literal(v) for k, v in args.param}
    if args.jobs < 1:
        parser.error(f"--jobs takes a whole number >= 1 (notebooks at a time); got {args.jobs}")
    try:  # fail before any kernel starts
        todo = notebooks.plan(args.profile, args.only, params)
        notebooks.check_requirements(args.profile, todo)
    except (ValueError, RuntimeError, FileNotFoundError) as err:
        parser.error(str(err))
    if args.dry_run:
        for name, chosen in todo:
            print(name, " ".join(f"{k}={v!r}" for k, v in chosen.items()) or "(its defaults)")
        return 0
    try:
        summary = notebooks.run(args.profile, args.only, params, args.out, jobs=args.jobs)
    except notebooks.Interrupted as stop:
        print(f"\ninterrupted during {stop.notebook}: its partial copy and summary.csv are "
              f"in {stop.out_dir}", file=sys.stderr)
        return 130
    print(summary.drop(columns="error").to_string(index=False))
    for row in summary[summary["error"] != ""].itertuples():  # one line each, left to read
        print(f"{row.notebook} {row.status} at {row.error}")
    if args.html:
        _html(summary.attrs["out_dir"], None, parser)
    return 0 if (summary["status"] == "ok").all() else 1


def _html(run_dir, out, parser) -> int:
    from vitplast.course import notebooks

    try:
        index = reading_copy.write_site(run_dir, notebooks.NOTEBOOKS, out)
    except (FileNotFoundError, RuntimeError) as err:
        parser.error(str(err))
    print(f"reading copy: {index} (open it in a browser)")
    return 0


def literal(text: str):
    """``"3"`` -> 3, ``"[1, 2]"`` -> [1, 2], anything else stays a string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
