"""The residual stream's scale: what sets the plasticity ranking, measured.

Paper: Props. 1, 3-4 and Takeaway 2. The bounds say which statistics of a component's input
set its plasticity: a LayerNorm's, 1 / sigma (the per-token std of the stream it reads,
Prop. 1); attention's, the token norm r (r^4 ||A||^2 in Prop. 3, r^2 through the energy in
Prop. 4), seen in how peaked the softmax is (its entropy: log n when uniform, 0 when one-hot).
On ViT-B the paper's r is 19.4 (``paper.VITB_RMS_TOKEN_NORM``). This module measures them on a
model and along its pretraining (``stream_statistics``), the ranking when the embedding alone
is rescaled (``embedding_scale_rankings``: what the ``embedding`` protocol sees), and the
ranking of the same network under the residual-stream gauge (``gauge_rankings``,
``vitplast.measure.gauge``); ``report.scale_findings`` states each ranking as findings rows,
and ``train.recipes`` measures a model pretrained by another recipe.
"""

from __future__ import annotations

import math

import pandas as pd
import torch
from scipy.stats import spearmanr
from torch import nn

from vitplast import cached, models
from vitplast.measure import empirical, gauge
from vitplast.measure.bounds import token_sigma
from vitplast.measure.components import TABLE, submodule
from vitplast.measure.empirical import SOURCE
from vitplast.measure.fingerprint import stamp
from vitplast.measure.plasticity import measure, order, ranking
from vitplast.measure.rates import component_inputs
from vitplast.measure.tokens import rms_token_norm, token_images
from vitplast.paper import FIG2_PLASTICITY, PLASTICITY_ORDER, VITB_RMS_TOKEN_NORM
from vitplast.weights import ModelSpec


@torch.no_grad()
def attention_entropy(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each query's attention distribution, (B, H, n), for inputs x
    (B, n, d) of a timm Attention (qk-norm applied if present).

    Paper: Props. 3-4 (large token norms make the softmax peaked: low entropy).
    """
    b, n, _ = x.shape
    qkv = attn.qkv(x.float()).reshape(b, n, 3, attn.num_heads, attn.head_dim)  # (B, n, 3, H, dh)
    q, k, _ = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, n, dh)
    q, k = attn.q_norm(q), attn.k_norm(k)
    p = torch.softmax(q @ k.transpose(-1, -2) * attn.head_dim ** -0.5, dim=-1)  # (B, H, n, n)
    return -(p * torch.log(p.clamp_min(1e-30))).sum(dim=-1)


@torch.no_grad()
def model_statistics(model: nn.Module, images: torch.Tensor,
                     token_images: torch.Tensor | None = None) -> pd.DataFrame:
    """Per layer, the statistics the bounds read, from one pass per protocol over ``images``:
    ``r_embedding`` (``rms_token_norm`` on ``token_images``, else on ``images``: given
    ``tokens.token_images(model)``, the model's token scale of ``tokens.token_scale``),
    ``sigma_ln1`` / ``sigma_ln2`` (mean per-token sqrt(var + eps) of the stream LN1 / LN2 read,
    ``hidden``),
    ``ln1_bound`` (max|gamma| / that mean sigma: Prop. 1's plug-in, not a bound, which needs
    each token's sigma; the column keeps its stored name, tables show it as ``ln1_plugin``),
    and ``entropy_hidden`` / ``entropy_embedding`` (attention entropy / log n, mean over heads
    and tokens, on LN1's output and on the raw embedding).

    Paper: Props. 1, 3-4."""
    model = model.eval()
    inputs = {p: component_inputs(model, images, p) for p in ("hidden", "embedding")}
    r, rows = rms_token_norm(model, images if token_images is None else token_images), []
    norms = [c for c in TABLE if c.bound == "layernorm_bound"]  # LN1, LN2
    mha = next(c for c in TABLE if c.bound == "mha_bound")
    for layer, block in enumerate(model.blocks):
        hid, row = inputs["hidden"], dict(layer=layer, r_embedding=r)
        for c in norms:
            ln = submodule(block, c.module)
            row[f"sigma_{c.name.lower()}"] = token_sigma(hid[(layer, c.name)],
                                                         ln.eps).mean().item()
        ln1 = submodule(block, next(c.module for c in norms if c.name == "LN1"))
        row["ln1_bound"] = ln1.weight.abs().max().item() / row["sigma_ln1"]
        for p, inp in inputs.items():
            u = inp[(layer, mha.name)]
            entropy = attention_entropy(submodule(block, mha.module), u).mean() / math.log(
                u.shape[1])
            row[f"entropy_{p}"] = float(entropy)
        rows.append(row)
    return pd.DataFrame(rows)


def stream_statistics(model_name: str | ModelSpec, task: str, checkpoints, *, source: str = SOURCE,
                      data_root: str = "", n_pairs: int = 256, root=None) -> pd.DataFrame:
    """``model_statistics`` at each checkpoint of the embedded model on both images of one
    task's pairs (the pretraining domain's x and the task's y, as ``plasticity.measurement``;
    load-or-compute, keyed by the model's weights (``models.weights_id``); with ``root``,
    kept beside a study there: ``cached.kept_table``), with ``checkpoint`` and ``epoch``
    columns.

    Paper: Props. 1, 3-4 beside its r = 19.4; along pretraining (not studied there).
    """
    def compute():
        frames, pairs = [], None
        for ckpt in checkpoints:
            kw = {"checkpoint": ckpt} if model_name == models.EMBEDDED_NAME else {}
            model = models.load_model(model_name, **kw)
            pairs = pairs or empirical.task_pairs(task, source, n_pairs=n_pairs, model=model,
                                                  data_root=data_root)
            images = torch.cat(pairs.tensors())  # both images of every pair, as ``measurement``
            frames.append(model_statistics(model, images, token_images(
                model, task=source or task, data_root=data_root)).assign(checkpoint=ckpt))
        out = pd.concat(frames, ignore_index=True)
        out["epoch"] = out["checkpoint"].map(empirical.checkpoint_epochs(model_name, checkpoints))
        return out

    key = dict(model_name=model_name, task=task, checkpoints=list(checkpoints), source=source,
               data_root=data_root, n_pairs=n_pairs, images="x and y of the pairs",
               r="token_scale", weights=models.weights_id(model_name, checkpoints))
    return cached.kept_table("stream-statistics", key, compute, root, **stamp())


#: The statistics ``long_statistics`` keeps: column -> (its name in a figure, what its axis
#: shows, in words).
STATISTICS = {
    "r_embedding": ("embedding token norm r", "RMS norm of an embedded token"),
    "sigma_ln1": ("stream sigma (LN1 input)", "per-token std of LN1's input"),
    "ln1_bound": ("LN1 plug-in (not a bound)", "max|gamma| / mean sigma"),
    "entropy_hidden": ("attention entropy / log n (hidden)",
                       "entropy / log n (0 one-hot, 1 uniform)"),
    "entropy_embedding": ("attention entropy / log n (embedding)",
                          "entropy / log n (0 one-hot, 1 uniform)"),
}
#: A statistic's name in a figure -> its axis label: ``plots.lines(..., col="statistic",
#: ylabel=STATISTIC_LABELS)`` gives each panel its own.
STATISTIC_LABELS = dict(STATISTICS.values())


def long_statistics(stats: pd.DataFrame) -> pd.DataFrame:
    """``stream_statistics`` in long form (``statistic``, ``value``; one row per checkpoint,
    layer and statistic, named as in ``STATISTICS``), for one figure panel per statistic."""
    long = stats.melt(id_vars=["checkpoint", "epoch", "layer"], value_vars=list(STATISTICS),
                      var_name="statistic", value_name="value")
    long["statistic"] = long["statistic"].map({c: name for c, (name, _) in STATISTICS.items()})
    return long


def by_checkpoint(stats: pd.DataFrame) -> pd.DataFrame:
    """``stream_statistics`` averaged over layers, one row per checkpoint (in measured order),
    with the paper's r beside (``shown``: the plug-in named a plug-in)."""
    cols = ["epoch", "r_embedding", "sigma_ln1", "sigma_ln2", "ln1_bound", "entropy_hidden",
            "entropy_embedding"]
    out = stats.groupby("checkpoint", sort=False)[cols].mean()
    out.insert(2, "paper_r", VITB_RMS_TOKEN_NORM)
    return shown(out)


#: Stored column -> the name tables show: max|gamma| / MEAN sigma is Prop. 1's plug-in, which
#: notebook 03 shows is not a bound (the per-token bound is several times larger).
SHOWN = {"ln1_bound": "ln1_plugin"}


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """A table of stream statistics (``by_checkpoint``, ``train.recipes.recipe_statistics``)
    with its stored columns named as shown (``SHOWN``)."""
    return table.rename(columns=SHOWN)


def changed_rankings(model_name: str | ModelSpec, tasks, values, change, column: str, protocols, *,
              source: str, data_root: str, n_pairs: int) -> pd.DataFrame:
    """``plasticity.ranking`` of the final model changed by ``change(model, value)``, per value
    (a column named ``column``), task and protocol. At value 1 (no change) the rates are
    ``empirical.measure_tasks``'s cached ones (the same pairs: read, not measured, after
    notebook 02's section 1)."""
    frames, pairs = [], {}
    for task in tasks:
        for value in values:
            if value == 1.0:
                rates = empirical.measure_tasks(model_name, [task], protocols=protocols,
                                                source=source, data_root=data_root,
                                                n_pairs=n_pairs, progress=False)
                frames.append(ranking(rates.drop(columns=["model", "checkpoint"]))
                              .assign(**{column: 1.0}))
                continue
            model = change(models.load_model(model_name), value)
            if task not in pairs:
                pairs[task] = empirical.task_pairs(task, source, n_pairs=n_pairs, model=model,
                                                   data_root=data_root)
            for protocol in protocols:
                rates = measure(model, pairs[task], protocol=protocol, progress=False,
                                meta=dict(task=task))
                frames.append(ranking(rates).assign(**{column: float(value)}))
    return pd.concat(frames, ignore_index=True)


def gauge_rankings(model_name: str | ModelSpec, tasks, cs=(1.0, 8.0), *,
                   protocols=("embedding", "hidden"),
                   source: str = SOURCE, data_root: str = "", n_pairs: int = 256,
                   root=None) -> pd.DataFrame:
    """The ranking of the same network at each gauge c (``gauge.rescale_stream``: same function),
    per task and protocol (load-or-compute; with ``root``, kept beside a study there:
    ``cached.kept_table``): ``plasticity.ranking`` with a ``c`` column.

    Paper: Takeaway 2 (its order, Fig. 2) read against a free scale."""
    key = dict(model_name=model_name, tasks=list(tasks), cs=list(cs), protocols=list(protocols),
               source=source, data_root=data_root, n_pairs=n_pairs,
               weights=models.weights_id(model_name))
    return cached.kept_table("gauge-rankings", key, lambda: changed_rankings(
        model_name, tasks, cs, gauge.rescale_stream, "c", protocols, source=source,
        data_root=data_root, n_pairs=n_pairs), root, **stamp())


def embedding_scale_rankings(model_name: str | ModelSpec, tasks, scales=(1.0, 2.0, 4.0, 8.0), *,
                             source: str = SOURCE, data_root: str = "", n_pairs: int = 256,
                             root=None) -> pd.DataFrame:
    """The ``embedding``-protocol ranking when only the embedding is multiplied by s
    (``gauge.scale_embedding``; not function-preserving: what this protocol sees of the gauge),
    per task (load-or-compute; with ``root``, kept beside a study there:
    ``cached.kept_table``): ``plasticity.ranking`` with a ``scale`` column.

    Paper: Fig. 2's protocol, its r = 19.4 vs this model's."""
    key = dict(model_name=model_name, tasks=list(tasks), scales=list(scales), source=source,
               data_root=data_root, n_pairs=n_pairs,
               weights=models.weights_id(model_name))
    return cached.kept_table("embedding-scale-rankings", key, lambda: changed_rankings(
        model_name, tasks, scales, gauge.scale_embedding, "scale", ("embedding",),
        source=source, data_root=data_root, n_pairs=n_pairs), root, **stamp())


def beside_fig2(ranked: pd.DataFrame, by: str | None = "c") -> pd.DataFrame:
    """Per component: the paper's Fig. 2 value beside the measured plasticity (mean over
    tasks) for each (protocol, ``by``) of a ranking table (``by`` None: per protocol)."""
    if by is None:
        wide = ranked.pivot_table(index="component", columns="protocol", values="plasticity",
                                  observed=True)
        wide.columns = [f"measured, {p}" for p in wide.columns]
    else:
        wide = ranked.pivot_table(index="component", columns=["protocol", by],
                                  values="plasticity", observed=True)
        wide.columns = [f"{p}, {v}" if isinstance(v, str) else f"{p}, {by} = {v:g}"
                        for p, v in wide.columns]
    wide.insert(0, "paper (Fig. 2)", pd.Series(FIG2_PLASTICITY))
    return wide.loc[list(PLASTICITY_ORDER)]


def orders(ranked: pd.DataFrame, by: str = "c") -> pd.DataFrame:
    """The order of the components (mean over tasks) per (protocol, ``by``), as text."""
    mean = (ranked.groupby(["protocol", by, "component"], observed=True)["plasticity"].mean()
            .reset_index())
    mean["rank"] = mean.groupby(["protocol", by])["plasticity"].rank(ascending=False)
    return mean.groupby(["protocol", by]).apply(order, include_groups=False).rename("order") \
        .to_frame()


def spearman_fig2(g: pd.DataFrame) -> pd.Series:
    """Per task of a ranking table (one protocol): Spearman's rho of the measured plasticity
    with the paper's Fig. 2 values over the five components."""
    return g.groupby("task").apply(lambda t: spearmanr(
        t.set_index("component").loc[list(PLASTICITY_ORDER), "plasticity"],
        [FIG2_PLASTICITY[c] for c in PLASTICITY_ORDER]).statistic, include_groups=False)


__all__ = ["SHOWN", "STATISTICS", "STATISTIC_LABELS", "attention_entropy", "model_statistics",
           "stream_statistics", "gauge_rankings", "embedding_scale_rankings", "beside_fig2",
           "orders", "spearman_fig2", "long_statistics", "by_checkpoint", "shown"]
