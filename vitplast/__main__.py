"""Command line: ``vitplast {pretrain,sweep,notebooks,data,cache,weights} ...`` (or ``python -m
vitplast``); ``notebooks`` is ``vitplast.cli_notebooks``'s, ``data`` and ``cache``
``vitplast.cli_files``'s, ``weights`` ``vitplast.cli_weights``'s."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path

from vitplast import __version__, cli_files, cli_notebooks, cli_weights, files
from vitplast.experiments import jobs, studies
from vitplast.experiments.runtime import (
    CLUSTERS,
    EXECUTORS,
    FLAGS,
    Executor,
    Runtime,
    add_arguments,
    at_least,
    workers,
)

#: ``sweep --executor submitit`` options -> submitit ``update_parameters`` keys.
SUBMITIT_OPTIONS = {"timeout_min": "timeout_min", "gpus_per_node": "gpus_per_node",
                    "cpus_per_task": "cpus_per_task", "partition": "slurm_partition",
                    "array_parallelism": "slurm_array_parallelism",
                    "runs_per_job": "runs_per_job"}
PAPER_SLURM_EXAMPLE = (
    "vitplast sweep --study paper --data-root data/paper --weights-file vit_b16_in21k.safetensors "
    "--root results/paper --executor submitit --cluster slurm --partition gpu --gpus-per-node 1 "
    "--cpus-per-task 8 --timeout-min 240 --array-parallelism 32 --slurm-param qos=normal")
#: ``vitplast sweep``'s exit status when runs are left not stored or stored failed (its
#: ``sweep.Outcome`` not ``complete``).
INCOMPLETE = 3
SWEEP_EXIT = f"""\
exit status:
  0    every run of the study (or of the selection: --shard, --limit) is stored ok or
       diverged (a finished run); with --status, the table was printed
  1    an error other than these (its traceback above), e.g. a setting of a run refused
       before any run trained (the message names the run and the setting)
  2    an option was refused (nothing ran)
  {INCOMPLETE}    runs are left not stored (a job died, or was cancelled or stopped before it
       ran them) or stored failed (the run raised); the last line says how many of each and
       the command that resumes (the same command; --retry-failed for the failed runs)
  130  interrupted (Ctrl-C or SIGTERM): the records and the session log are kept; the same
       command resumes
"""


class _ExitTable(argparse.HelpFormatter):
    """argparse's help, the exit status table (``SWEEP_EXIT``) kept as laid out."""

    def _fill_text(self, text, width, indent):
        if text.startswith("exit status:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vitplast", description=(
        "A study kit for 'Vision Transformer Finetuning Benefits from Non-Smooth Components': "
        "pretrain the embedded model, run finetuning studies (here or on a SLURM cluster), "
        "run the notebook sequence headlessly (and read a run as static HTML), pack the "
        "shipped results for an installed copy, see or clear the cache, and fetch real "
        "pretrained weights."))
    parser.add_argument("--version", action="version", version=f"vitplast {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("pretrain", help="pretrain the embedded model on Fashion-MNIST",
                       description="Pretrain the embedded ViT on Fashion-MNIST (about 1.5 h on "
                       "2 CPU cores) and write its checkpoints, manifest and model card; resumes "
                       "at the last finished stage.")
    p.add_argument("--out", default=None, help="output folder (default: the package's "
                   "vitplast/checkpoints/)")
    p.add_argument("--train-limit", type=int, default=None, help="use only N training images")
    p.add_argument("--weight-decay", type=float, default=None, help="AdamW weight decay "
                   "(default: the shipped model's recipe, vitplast.train.pretrain.RECIPE)")
    p.add_argument("--stages", default=None, help="EPOCHS:PEAK_LR:SEED per "
                   "stage of the cosine schedule (default: the shipped model's, e.g. "
                   "12:1e-3:0,8:5e-4:1)")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")

    _add_sweep(sub)

    cli_notebooks.add_parser(sub)
    cli_files.add_parsers(sub)
    cli_weights.add_parser(sub)
    return parser


def _add_sweep(sub) -> None:
    """The ``sweep`` command's arguments (every choice listed, so a bad one fails here), from
    the study registry and the runtime's flags (``runtime.FLAGS``; neither imports torch)."""
    sw = sub.add_parser("sweep", help="run (or resume) a finetuning study",
                        description="Run the runs of a study that its results store lacks, "
                        "here (serial) or as a submitit job array (a SLURM cluster); every run "
                        "stores its own record, so the same command resumes. Paper grid on "
                        f"SLURM: {PAPER_SLURM_EXAMPLE}", epilog=SWEEP_EXIT,
                        formatter_class=_ExitTable)
    sw.add_argument("--study", default="main", choices=list(studies.STUDIES), metavar="STUDY",
                    help="; ".join(s.describe() for s in studies.STUDIES.values()))
    sw.add_argument("--root", default=None, help="results folder (default: the study's; "
                    "data/<store> of a checkout, or $VITPLAST_DATA/<store>; smoke: "
                    ".cache/finetune-smoke, or $VITPLAST_CACHE/finetune-smoke; paper: "
                    "results/paper)")
    add_arguments(sw)  # the runtime's flags (runtime.FLAGS)
    sw.add_argument("--executor", default="serial", choices=EXECUTORS,
                    help="serial | submitit")
    sw.add_argument("--cluster", default=None, choices=CLUSTERS,
                    help="submitit cluster: slurm | local | debug")
    sw.add_argument("--timeout-min", type=int, default=None,
                    help="submitit: time limit per job (default: the SLURM partition's; a "
                    "week on --cluster local)")
    sw.add_argument("--gpus-per-node", type=int, default=None, help="submitit: GPUs per job")
    sw.add_argument("--cpus-per-task", type=int, default=None, help="submitit: CPU cores per job")
    sw.add_argument("--partition", default=None, help="submitit: SLURM partition")
    sw.add_argument("--array-parallelism", type=int, default=None,
                    help="submitit: at most N jobs of the array running at once (SLURM)")
    sw.add_argument("--runs-per-job", type=at_least(1), default=None, help="submitit: runs "
                    "trained one after another in each job, which pays its start-up once "
                    "(default: the runs dealt over as many jobs as can run at once: "
                    "--array-parallelism, else the partition's idle CPUs / --cpus-per-task); "
                    "a setting's LRs stay in one job")
    sw.add_argument("--slurm-param", action="append", default=[], metavar="KEY=VALUE",
                    help="another SLURM setting, repeatable: a submitit SlurmExecutor parameter "
                    "(qos, account, mem, constraint, ...) or any sbatch option "
                    "(slurm_additional_parameters)")
    sw.add_argument("--status", action="store_true", help="run nothing: print how much of "
                    "the study the store holds, per task and seed, and the CPU hours left")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    command = {"pretrain": _pretrain, "sweep": _sweep, "notebooks": cli_notebooks.command,
               "data": cli_files.command, "cache": cli_files.command,
               "weights": cli_weights.command}[args.command]
    return command(args, parser, argv) or 0


def _pretrain(args, parser, argv) -> int:
    from vitplast import models
    from vitplast.train import pretrain

    try:
        stages = None if args.stages is None else pretrain.parse_stages(args.stages)
    except ValueError as err:
        parser.error(f"--stages {err}")
    _check_device(args, parser)  # before --out is made
    extra = {k: v for k, v in (("weight_decay", args.weight_decay), ("stages", stages))
             if v is not None}
    manifest = pretrain.pretrain(args.out or models.DATA_DIR, train_limit=args.train_limit,
                                 device=args.device, **extra)
    for name, c in manifest["checkpoints"].items():
        print(f"{name:>8}  epoch {c['epoch']:>6}  test acc {c['test_acc']:.4f}  {c['file']}")
    return 0


def _sweep(args, parser, argv) -> int:
    """Run (or, with --status, only count) the study's runs the store lacks; log the session.
    Every option is refused before a cluster job starts."""
    kwargs = _submitit_parameters(args, parser)
    if kwargs.get("cluster") == "slurm" and not shutil.which("srun"):
        print("vitplast sweep: error: --cluster slurm, but SLURM's srun is not on this "
              "machine's PATH: run the command on the cluster's login node, or drop --cluster "
              "(submitit then picks its local executor) to try the job array here",
              file=sys.stderr)
        return 2
    study = studies.get(args.study)
    root = str(args.root or study.root())
    _check_sweep_args(args, parser, study, root)
    # a submitit array's jobs have --cpus-per-task each; else a SLURM job reads its own cores
    # when a run trains (runner.build)
    cpus = args.cpus_per_task if args.executor == "submitit" else None
    try:  # also with --status, so that no bad option passes unnoticed
        runtime = Runtime(**{**{f.name: getattr(args, f.name) for f in FLAGS if f.cli},
                             "workers": workers(args.workers, cpus)})
        study.check(runtime)
    except ValueError as err:
        parser.error(f"--study {args.study}: {err}")
    if args.status:
        print(study.progress(root, runtime).to_string(index=False))
        return 0
    # Ctrl-C or `kill` stops it cleanly (also under nohup, which ignores SIGINT): the run in
    # flight is dropped, the session logged; the same command resumes.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    start, command = time.perf_counter(), "python -m vitplast " + shlex.join(argv or sys.argv[1:])
    interrupted, outcome = False, None
    try:  # with --executor submitit, jobs start while the runs are listed (jobs.prestart)
        with (jobs.prestart(Path(root) / "submitit", **kwargs)
              if args.executor == "submitit" else contextlib.nullcontext()) as early:
            outcome = study.run(root, runtime, Executor(args.executor, {**kwargs, **(
                {"early": early} if early else {})}))
    except KeyboardInterrupt:
        interrupted = True
    finally:  # also when interrupted: what the store holds now is logged
        summary = _log(root, command, start, args.device)
    if interrupted:  # one line: the records and the session log are kept
        print(f"\ninterrupted: {len(summary)} run record(s) in {root}, the session logged in "
              "its study.json; the same command resumes", file=sys.stderr)
        return 130
    print(summary["status"].value_counts().to_string())  # the whole store
    if outcome.complete:
        print(outcome.says())
        return 0
    resume = command + (" --retry-failed" if outcome.counts["failed"] and not args.retry_failed
                        else "")
    print(f"vitplast sweep: {outcome.says(resume)}", file=sys.stderr)
    return INCOMPLETE


def _log(root: str, command: str, start: float, device):
    """Log the session in the store's study.json, a second Ctrl-C ignored meanwhile; return
    what the store holds (``results.records_table``)."""
    from vitplast.experiments import results, study_log

    previous = [(s, signal.signal(s, signal.SIG_IGN)) for s in (signal.SIGINT, signal.SIGTERM)]
    try:  # a second Ctrl-C must not lose the log
        summary = results.records_table(root)
        study_log.log_session(root, command, summary, time.perf_counter() - start, device)
    finally:
        for number, handler in previous:
            signal.signal(number, handler)
    return summary


def _check_sweep_args(args, parser, study, root: str) -> None:
    """``sweep``'s --root (``root``: given, or ``study``'s own store) and --device, refused
    before anything is loaded or run (the other settings: ``runtime.Runtime`` and
    ``Study.check``)."""
    if args.root is not None and os.path.exists(args.root) and not os.path.isdir(args.root):
        parser.error(f"--root {args.root!r} is a file: the results store is a folder; give a "
                     "folder (it is created if missing)")
    _check_root(args, study, root, parser)
    _check_device(args, parser)


def _check_device(args, parser) -> None:
    """``--device``, refused (naming what this machine has) before anything is created."""
    from vitplast import inputs

    try:
        inputs.check_device(args.device)
    except ValueError as err:
        parser.error(f"--{err}")


def _check_root(args, study, root: str, parser) -> None:
    """Fail clearly when a shipped study's results store is not there: reading it
    (``--status``, the budget study) needs it; writing to the default one needs its parent (a
    checkout's data/, or $VITPLAST_DATA), so that an installed copy never writes into
    site-packages. Other studies' stores (a cache folder, results/paper) are made as needed."""
    if not study.shipped:
        return
    reads = args.status or study.READS_STORE
    if not Path(root).is_dir() and (reads or (args.root is None
                                              and not Path(root).parent.is_dir())):
        try:
            files.require_results(root)
        except FileNotFoundError as err:
            parser.error(str(err))


def _submitit_parameters(args, parser) -> dict:
    """The submitit options of ``sweep`` (``--cluster``, and ``AutoExecutor.update_parameters``
    keywords), refused without ``--executor submitit``;
    ``--slurm-param KEY=VALUE`` becomes ``slurm_KEY`` when KEY is a parameter of submitit's
    SlurmExecutor, else an entry of ``slurm_additional_parameters`` (any sbatch option)."""
    out = {key: getattr(args, option) for option, key in SUBMITIT_OPTIONS.items()
           if getattr(args, option) is not None}
    extra = {}
    if args.slurm_param:
        import submitit

        known = submitit.SlurmExecutor._valid_parameters() - {"additional_parameters"}
        for item in args.slurm_param:
            key, sep, value = item.partition("=")
            if not sep or not key:
                parser.error(f"--slurm-param takes KEY=VALUE, e.g. qos=high; got {item!r}")
            if key in known:
                out[f"slurm_{key}"] = cli_notebooks.literal(value)
            else:
                extra[key] = value
    if extra:
        out["slurm_additional_parameters"] = extra
    if args.cluster:
        out["cluster"] = args.cluster
    if out and args.executor != "submitit":
        parser.error(f"{sorted(out)} are submitit settings: add --executor submitit")
    return out


if __name__ == "__main__":
    sys.exit(main())
