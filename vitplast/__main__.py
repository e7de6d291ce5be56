"""Command line: ``python -m vitplast {pretrain,notebooks} ...``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vitplast", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("pretrain", help="pretrain the embedded model on Fashion-MNIST")
    p.add_argument("--out", default=None, help="output folder (default: the package's data/)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (default: the recipe's)")
    p.add_argument("--train-limit", type=int, default=None, help="use only N training images")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")

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

        kwargs = {} if args.epochs is None else {"epochs": args.epochs}
        manifest = pretrain.pretrain(args.out or models.DATA_DIR, train_limit=args.train_limit,
                                     device=args.device, **kwargs)
        for name, c in manifest["checkpoints"].items():
            print(f"{name:>8}  epoch {c['epoch']:>6}  test acc {c['test_acc']:.4f}  {c['file']}")
    elif args.command == "notebooks":
        from vitplast import notebooks

        if args.action == "list":
            for name in notebooks.available():
                print(name, notebooks.notebook_parameters(name))
            return 0
        params = {k: _literal(v) for k, v in args.param}
        try:
            notebooks.plan(args.profile, args.only, params)  # fail before any kernel starts
        except ValueError as err:
            parser.error(str(err))
        summary = notebooks.run(args.profile, args.only, params, args.out)
        print(summary.to_string(index=False))
        return 0 if (summary["status"] == "ok").all() else 1
    return 0


def _literal(text: str):
    """``"3"`` -> 3, ``"[1, 2]"`` -> [1, 2], anything else stays a string."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


if __name__ == "__main__":
    sys.exit(main())
