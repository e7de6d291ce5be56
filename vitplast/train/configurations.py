"""Finetuning configurations: what a run trains, named (``configs``) or as parameter patterns.

Paper: section 5, the seven configurations of its grid (``PAPER_CONFIGS``): full finetuning,
head-only, and one per component (each trains that component's parameters, ``Component.patterns``
of ``vitplast.measure.components.TABLE``, in every block). The new head and the final norm
(``ALWAYS_TRAINED``) train in every configuration, as in the paper.

Every name here is derived from a component table (``table=``, ``components.TABLE`` by
default), so a row added to the table is a configuration too: ``configs``, ``config_order``.
``CONFIGS`` and ``CONFIG_ORDER`` are those of ``TABLE``. Used by the training loop
(``finetune.train``), the run checks (``experiments.runs``) and notebook 04's table of
trainable counts (``trainable_table``).
"""

from __future__ import annotations

import fnmatch
import json
from typing import TYPE_CHECKING

from vitplast import paper
from vitplast.measure.components import TABLE, names

if TYPE_CHECKING:  # torch and pandas are imported where a model or a table is used: the
    import pandas as pd  # study presets read the names here on the command line without them
    from torch import nn

#: The paper's seven finetuning configurations (section 5), in the order of its grid.
PAPER_CONFIGS = ("full", "head", "LN1", "MHA", "LN2", "FC1", "FC2")
#: Parameters that train in every configuration (the new head and the final norm).
ALWAYS_TRAINED = ["head.*", "norm.*", "fc_norm.*", "head_norm.*"]


def configs(table=TABLE) -> dict[str, list[str]]:
    """Finetuning configuration -> parameter-name patterns (fnmatch) it trains: full,
    head-only, one per component of ``table``, the embedding."""
    return {"full": ["*"], "head": [], **{c.name: list(c.patterns) for c in table},
            "embedding": ["patch_embed.*", "cls_token", "reg_token", "pos_embed"]}


def config_order(table=TABLE) -> tuple[str, ...]:
    """The order tables and figures list configurations in: full, head-only, the components
    of ``table`` in the order of the paper's Table 1 (``paper.TABLE1_CONFIGS``), then its other
    components in the table's order (a new row comes after the paper's five)."""
    mine = names(table)
    return ("full", "head", *(c for c in paper.TABLE1_CONFIGS if c in mine),
            *(c for c in mine if c not in paper.TABLE1_CONFIGS))


#: Finetuning configuration -> parameter-name patterns (fnmatch) it trains (``configs()``).
CONFIGS = configs()
#: The order tables and figures list configurations in (``config_order()``).
CONFIG_ORDER = config_order()


def trainable_names(model: nn.Module, config: str | list[str], *, train_head: bool = True,
                    table=TABLE) -> list[str]:
    """Names of the parameters a finetuning configuration trains.

    Args:
        config: a name in ``configs(table)`` or a list of fnmatch patterns over parameter
            names.
        train_head: also train the head and final norm (the paper always does).
        table: the component table whose configurations ``config`` may name.

    Raises:
        ValueError: an unknown configuration name; patterns that select no parameter (a typo
            would otherwise train the head alone); nothing to train. The message names the
            patterns and some of the model's parameter names.
    """
    patterns = _patterns(config, table)
    params = [n for n, _ in model.named_parameters()]
    chosen = [n for n in params if any(fnmatch.fnmatch(n, p) for p in patterns)]
    if not chosen and (patterns or not train_head):
        examples = [n for n in params if n.startswith(("blocks.0.", "patch_embed."))][:6]
        what = ("only the head and final norm would train" if train_head
                else "nothing would train")
        raise ValueError(f"configuration {config!r} selects no parameter of "
                         f"{type(model).__name__} ({what}); its parameter names look like "
                         f"{examples}: use a configuration of {list(configs(table))} or "
                         "patterns matching such names")
    if train_head:
        chosen = [n for n in params if any(fnmatch.fnmatch(n, p)
                                           for p in patterns + ALWAYS_TRAINED)]
    return chosen


def _patterns(config, table) -> list[str]:
    """The patterns of a configuration name or a list of patterns."""
    known = configs(table)
    if isinstance(config, str):
        if config not in known:
            raise ValueError(f"unknown configuration {config!r}; valid: {list(known)} "
                             "or a list of parameter-name patterns")
        return list(known[config])
    if not isinstance(config, (list, tuple)) or not all(isinstance(p, str) for p in config):
        raise ValueError(f"config={config!r} is not valid: a configuration takes a name of "
                         f"{list(known)} or a list of parameter-name patterns (strings)")
    return list(config)


def set_trainable(model: nn.Module, names: list[str]) -> int:
    """Turn ``requires_grad`` on for exactly ``names`` and off for all others; return the count."""
    chosen = set(names)
    unknown = chosen - {n for n, _ in model.named_parameters()}
    if unknown:
        raise ValueError(f"no such parameters: {sorted(unknown)[:5]}")
    total = 0
    for n, p in model.named_parameters():
        p.requires_grad_(n in chosen)
        total += p.numel() if n in chosen else 0
    return total


def trainable_table(model: nn.Module, configs, *, train_head: bool = True,
                    table=TABLE) -> pd.DataFrame:
    """Exact trainable-parameter counts per configuration (``trainable``), and their share of
    the model (``percent``): a DataFrame, one row per configuration (``config``; a list of
    patterns as JSON). Paper: section 5 (what each configuration trains); notebook 04.
    """
    import pandas as pd

    total = sum(p.numel() for p in model.parameters())
    rows = []
    for config in configs:
        chosen = set(trainable_names(model, config, train_head=train_head, table=table))
        n = sum(p.numel() for name, p in model.named_parameters() if name in chosen)
        rows.append(dict(config=config if isinstance(config, str) else json.dumps(config),
                         trainable=n, percent=100 * n / total))
    return pd.DataFrame(rows)


__all__ = ["ALWAYS_TRAINED", "CONFIGS", "CONFIG_ORDER", "PAPER_CONFIGS", "config_order",
           "configs", "set_trainable", "trainable_names", "trainable_table"]
