"""Command line: ``python -m vitplast {pretrain,sweep,notebooks} ...``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

STUDIES = ["main", "budget", "confounds"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vitplast", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("pretrain", help="pretrain the embedded model on Fashion-MNIST")
    p.add_argument("--out", default=None, help="output folder (default: the package's data/)")
    p.add_argument("--train-limit", type=int, default=None, help="use only N training images")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")

    sw = sub.add_parser("sweep", help="run (or resume) an embedded study")
    sw.add_argument("--study", default="main", help="main (notebook 04, into data/finetune) | "
                    "budget (notebook 04's 4x-steps check, into data/finetune; needs the main "
                    "study) | confounds (notebook 05, into data/confounds)")
    sw.add_argument("--root", default=None, help="results folder (default: the study's)")
    sw.add_argument("--executor", default="serial", help="serial | submitit")
    sw.add_argument("--cluster", default=None, help="submitit cluster: slurm | local | debug")
    sw.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    sw.add_argument("--precision", default=None, help="auto | fp32 | bf16: autocast on CUDA "
                    "(default auto: bf16 where supported); a runtime setting, not in run hashes")
    sw.add_argument("--order", default="seed-first", help="seed-first: every (task, config, "
                    "lr) once before the next seed, so a partial sweep covers the grid; grid")
    sw.add_argument("--limit", type=int, default=None, help="run at most N missing runs")
    sw.add_argument("--shard", default=None, metavar="I/N", help="run only every N-th run from "
                    "the I-th (0-based): N processes or machines share one store")
    sw.add_argument("--status", action="store_true", help="run nothing: print how much of "
                    "the study the store holds, per task and seed, and the CPU hours left")
    sw.add_argument("--retry-failed", action="store_true", help="also re-run the stored runs "
                    "whose status is failed")

    nb = sub.add_parser("notebooks", help="run the notebook sequence headlessly (papermill)")
    nb_sub = nb.add_subparsers(dest="action", required=True)
    r = nb_sub.add_parser("run", help="execute the notebooks in order into runs/<timestamp>/")
    r.add_argument("--profile", default="default", help="smoke | default | paper")
    r.add_argument("--only", nargs="*", default=None, help="notebook prefixes, e.g. 03 04")
    r.add_argument("-p", "--param", nargs=2, action="append", default=[],
                   metavar=("NAME", "VALUE"), help="override a parameter (VALUE parsed as "
                   "a Python literal when possible)")
    r.add_argument("--out", default=None, help="output folder (default runs/<timestamp>-<profile>)")
    nb_sub.add_parser("list", help="list the notebooks and their parameters")

    args = parser.parse_args(argv)
    if args.command == "pretrain":
        from vitplast import models, pretrain

        manifest = pretrain.pretrain(args.out or models.DATA_DIR, train_limit=args.train_limit,
                                     device=args.device)
        for name, c in manifest["checkpoints"].items():
            print(f"{name:>8}  epoch {c['epoch']:>6}  test acc {c['test_acc']:.4f}  {c['file']}")
    elif args.command == "sweep":
        from vitplast import confounds, finetune, results, studies, sweep

        if args.study not in STUDIES:
            parser.error(f"unknown study {args.study!r}; valid: {STUDIES}")
        _check_sweep_args(args, parser)
        if args.study == "main":
            root = args.root or studies.MAIN_RESULTS
            configs, seeds = studies.runs_of(studies.MAIN), studies.MAIN["seeds"]
        elif args.study == "budget":
            root = args.root or studies.MAIN_RESULTS
            configs = studies.budget_runs(results.results(root))
            seeds = studies.BUDGET["seeds"]
        else:
            root = args.root or confounds.EMBEDDED_RESULTS
            configs, seeds = confounds.embedded_study(root), confounds.EMBEDDED_STUDY["seeds"]
        if args.precision and args.precision not in finetune.PRECISIONS:
            parser.error(f"unknown precision {args.precision!r}; "
                         f"valid: {list(finetune.PRECISIONS)}")
        if args.precision:
            configs = [{**c, "precision": args.precision} for c in configs]
        if args.status:
            print(sweep.progress(configs, root).to_string(index=False))
            return 0
        if args.order == "seed-first":
            configs.sort(key=lambda c: seeds.index(c["seed"]))
        elif args.order != "grid":
            parser.error(f"unknown order {args.order!r}; valid: ['seed-first', 'grid']")
        if args.shard:
            i, n = _shard(args.shard, parser)
            configs = configs[i::n]
        if args.limit is not None:
            from vitplast import store

            configs = [c for c in configs if not store.exists(root, c)][:args.limit]
        kwargs = {"cluster": args.cluster} if args.cluster else {}
        # Ctrl-C or `kill` stops it cleanly (also under nohup, which ignores SIGINT): the run in
        # flight is dropped, the session logged; the same command resumes.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        start, command = time.perf_counter(), "python -m vitplast " + " ".join(argv or sys.argv[1:])
        try:
            sweep.run_sweep(configs, root, executor=args.executor, device=args.device,
                            retry_failed=args.retry_failed, **kwargs)
        finally:  # also when interrupted: what the store holds now is logged
            summary = results.results(root)
            sweep.log_session(root, command, summary, time.perf_counter() - start, args.device)
        print(summary["status"].value_counts().to_string())
    elif args.command == "notebooks":
        from vitplast import notebooks

        if args.action == "list":
            for name in notebooks.available():
                print(name, notebooks.notebook_parameters(name))
            return 0
        params = {k: _literal(v) for k, v in args.param}
        try:  # fail before any kernel starts
            notebooks.check_requirements(args.profile,
                                         notebooks.plan(args.profile, args.only, params))
        except (ValueError, RuntimeError, FileNotFoundError) as err:
            parser.error(str(err))
        summary = notebooks.run(args.profile, args.only, params, args.out)
        print(summary.to_string(index=False))
        return 0 if (summary["status"] == "ok").all() else 1
    return 0


def _check_sweep_args(args, parser) -> None:
    """``sweep``'s --limit, --root and --device, refused before anything is loaded or run."""
    import torch

    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit takes N >= 1 (run at most N missing runs), got {args.limit}; "
                     "leave it out to run every missing run, or use --status to run none")
    if args.root is not None and os.path.exists(args.root) and not os.path.isdir(args.root):
        parser.error(f"--root {args.root!r} is a file: the results store is a folder; give a "
                     "folder (it is created if missing)")
    if args.device is None:
        return
    try:
        device = torch.device(args.device)
    except RuntimeError as err:
        parser.error(f"--device {args.device!r} is not a device ({err}); valid: cpu, cuda, "
                     "cuda:N, mps, or leave it out for cuda when available")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device!r}: no CUDA GPU is available here; use --device "
                     "cpu or leave it out")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        parser.error(f"--device {args.device!r}: only {torch.cuda.device_count()} CUDA "
                     "device(s) here")
    if device.type == "mps" and not torch.backends.mps.is_available():
        parser.error(f"--device {args.device!r}: MPS is not available here; use --device cpu")


def _shard(text: str, parser) -> tuple[int, int]:
    """``"1/4"`` -> (1, 4), or a parser error."""
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        i, n = -1, 0
    if not 0 <= i < n:
        parser.error(f"--shard takes I/N with 0 <= I < N, e.g. 0/2; got {text!r}")
    return i, n


def _literal(text: str):
    """``"3"`` -> 3, ``"[1, 2]"`` -> [1, 2], anything else stays a string."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


if __name__ == "__main__":
    sys.exit(main())
