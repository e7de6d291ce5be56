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

    args = parser.parse_args(argv)
    if args.command == "pretrain":
        from vitplast import models, pretrain

        kwargs = {} if args.epochs is None else {"epochs": args.epochs}
        manifest = pretrain.pretrain(args.out or models.DATA_DIR, train_limit=args.train_limit,
                                     device=args.device, **kwargs)
        for name, c in manifest["checkpoints"].items():
            print(f"{name:>8}  epoch {c['epoch']:>6}  test acc {c['test_acc']:.4f}  {c['file']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
