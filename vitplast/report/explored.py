"""The explorers' measurements (notebook 06), kept beside a study when they are of the embedded
model: a fresh clone opens the explorers on views measured once and shipped.

``measured`` is the plasticity explorer's pass over a set of pairs (per-pair rates and the
bounds of Props. 1-3 for their statistics); ``rescaled`` is the LayerNorm explorer's
measurement of one rescaled LayerNorm. Each takes a ``key`` (what the model and the pairs are:
the checkpoint's sha256, task, source, number of pairs) and a ``root`` (a study's folder): with
both, the result is a ``cached.kept_table`` there, read instead of measured; without, measured
each time, as before. Changing a control to a view not kept measures it (and keeps it).

Paper: Definition 1, Props. 1-3 (``measured``); Prop. 1, objections 3-4 (``rescaled``).
"""

from __future__ import annotations

import copy

import pandas as pd

from vitplast import cached, models
from vitplast.measure import bounds, plasticity
from vitplast.train import ablations


def kept_key(model, checkpoint: str | None, **pairs) -> dict | None:
    """What an explorer's measurement of an embedded ``checkpoint`` depends on (its weights'
    sha256, the pairs: ``widgets.pair_tensors``'s arguments ``pairs``), the key of the table
    kept beside a study; None for a given ``model`` or random weights (measured every time).
    """
    if model is not None or checkpoint in (None, "random"):
        return None
    return dict(weights=models.weights_id(models.EMBEDDED_NAME, [checkpoint]),
                checkpoint=checkpoint,
                pairs="widgets.pair_tensors: 16 train, n_pairs test images", **pairs)


def measured(get, *, key: dict | None = None, root=None, **kwargs) -> tuple:
    """One pass over the pairs (``plasticity.measurement`` with ``kwargs``) of the model and
    pairs ``get()`` returns (``(model, x, y)``, asked for only when measured): the per-pair
    rates, and ``{(layer, component): bound}``, the valid bounds (Props. 1-3) of
    ``bounds.model_bounds`` for the statistics of those pairs. Kept (as arrays, the bounds in
    the table's attrs) with ``key`` and ``root``."""
    def compute():
        model, x, y = get()
        m = plasticity.measurement(model, x, y, progress=False, **kwargs)
        rates = m.rates.copy()
        rates.attrs["bounds"] = [[int(r.layer), str(r.component), float(r.bound)]
                                 for r in bounds.model_bounds(model, m.statistics).itertuples()]
        return rates

    if key is None or root is None:
        rates = compute()
    else:
        rates = cached.kept_table("explorer-rates", dict(key, **kwargs), compute, root,
                                  arrays=True)
    found = rates.attrs.pop("bounds")
    return rates, {(layer, component): bound for layer, component, bound in found}


def rescaled(get, ln: str, c: float, *, key: dict | None = None, root=None) -> dict:
    """The LayerNorm explorer at one (``ln``, ``c``): ``get()`` gives ``(model, x, y,
    logits)`` (``logits``: a function of a model, its logits on the pairs' images, and the
    original model's); LN's gamma and beta times ``c`` in every block, function-preserving
    (``ablations.rescale_layernorm``) and raw. Returns ``plasticity`` and ``bound`` (layer ->
    value, hidden protocol), ``diff_preserved`` and ``diff_raw`` (max |logit difference| from
    the original model). Kept (one row per layer) with ``key`` and ``root``."""
    def compute():
        base, x, y, logits, reference = get()
        kept = ablations.rescale_layernorm(copy.deepcopy(base), ln, c, preserve=True)
        raw = ablations.rescale_layernorm(copy.deepcopy(base), ln, c, preserve=False)
        rates, bound = measured(lambda: (kept, x, y))
        per = rates[rates["component"] == ln].groupby("layer")["rate"].mean()
        table = pd.DataFrame(dict(layer=per.index.to_numpy(), plasticity=per.to_numpy()))
        table["bound"] = [bound[(int(layer), ln)] for layer in table["layer"]]
        table.attrs.update(diff_preserved=(logits(kept) - reference).abs().max().item(),
                           diff_raw=(logits(raw) - reference).abs().max().item())
        return table

    if key is None or root is None:
        table = compute()
    else:
        table = cached.kept_table("explorer-layernorm", dict(key, ln=ln, c=float(c)), compute,
                                  root)
    return dict(plasticity=table.set_index("layer")["plasticity"].to_dict(),
                bound=dict(zip(table["layer"].tolist(), table["bound"].tolist())),
                diff_preserved=table.attrs["diff_preserved"], diff_raw=table.attrs["diff_raw"])
