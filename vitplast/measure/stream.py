"""The residual stream's scale: what sets the plasticity ranking, measured.

Paper: Props. 1, 3-4 and Takeaway 2. The bounds say which statistics of a component's input
set its plasticity: a LayerNorm's, 1 / sigma (the per-token std of the stream it reads,
Prop. 1); attention's, the token norm r (r^4 ||A||^2 in Prop. 3, r^2 through the energy in
Prop. 4), seen in how peaked the softmax is (its entropy: log n when uniform, 0 when one-hot).
On ViT-B the paper's r is 19.4 (``paper.VITB_RMS_TOKEN_NORM``). This module measures them on a
model and along its pretraining (``stream_statistics``), the ranking when the embedding alone
is rescaled (``embedding_scale_rankings``: what the ``embedding`` protocol sees), and the
ranking of the same network under the residual-stream gauge (``gauge_rankings``,
``vitplast.gauge``), and states each ranking as findings rows (``ranking_findings``); a
model pretrained by another recipe is in ``vitplast.recipes``.

Used by notebook 02.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from torch import nn

from vitplast.measure.empirical import SOURCE
from vitplast.measure.plasticity import component_inputs, measure, order, ranking
from vitplast.measure.tokens import rms_token_norm, token_images


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
    ``ln1_bound`` (Prop. 1 at that mean: max|gamma| / sigma), and ``entropy_hidden`` /
    ``entropy_embedding`` (attention entropy / log n, mean over heads and tokens, on LN1's
    output and on the raw embedding).

    Paper: Props. 1, 3-4. Used by notebook 02 (through ``stream_statistics``)."""
    from vitplast.measure.bounds import token_sigma

    model = model.eval()
    inputs = {p: component_inputs(model, images, p) for p in ("hidden", "embedding")}
    r, rows = rms_token_norm(model, images if token_images is None else token_images), []
    for layer, block in enumerate(model.blocks):
        hid = inputs["hidden"]
        row = dict(layer=layer, r_embedding=r,
                   sigma_ln1=token_sigma(hid[(layer, "LN1")], block.norm1.eps).mean().item(),
                   sigma_ln2=token_sigma(hid[(layer, "LN2")], block.norm2.eps).mean().item())
        row["ln1_bound"] = block.norm1.weight.abs().max().item() / row["sigma_ln1"]
        for p, inp in inputs.items():
            u = inp[(layer, "MHA")]
            entropy = attention_entropy(block.attn, u).mean() / math.log(u.shape[1])
            row[f"entropy_{p}"] = float(entropy)
        rows.append(row)
    return pd.DataFrame(rows)


def stream_statistics(model_name: str, task: str, checkpoints, *, source: str = SOURCE,
                      data_root: str = "", n_pairs: int = 256) -> pd.DataFrame:
    """``model_statistics`` at each checkpoint of the embedded model on both images of one
    task's pairs (the pretraining domain's x and the task's y, as ``plasticity.measurement``;
    load-or-compute), with ``checkpoint`` and ``epoch`` columns.

    Paper: Props. 1, 3-4 beside its r = 19.4; along pretraining (not studied there).
    Used by notebook 02."""
    from vitplast import empirical, models, store

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
               r="token_scale")
    return store.load_or_compute("stream-statistics", key, compute)


def long_statistics(stats: pd.DataFrame) -> pd.DataFrame:
    """``stream_statistics`` in long form (``statistic``, ``value``; one row per checkpoint,
    layer and statistic), for one figure panel per statistic. Used by notebook 02."""
    names = {"r_embedding": "embedding token norm r", "sigma_ln1": "stream sigma (LN1 input)",
             "ln1_bound": "LN1 bound max|gamma| / sigma",
             "entropy_hidden": "attention entropy / log n (hidden)",
             "entropy_embedding": "attention entropy / log n (embedding)"}
    long = stats.melt(id_vars=["checkpoint", "epoch", "layer"], value_vars=list(names),
                      var_name="statistic", value_name="value")
    long["statistic"] = long["statistic"].map(names)
    return long


def by_checkpoint(stats: pd.DataFrame) -> pd.DataFrame:
    """``stream_statistics`` averaged over layers, one row per checkpoint (in measured order),
    with the paper's r beside. Used by notebook 02."""
    from vitplast.paper import VITB_RMS_TOKEN_NORM

    cols = ["epoch", "r_embedding", "sigma_ln1", "sigma_ln2", "ln1_bound", "entropy_hidden",
            "entropy_embedding"]
    out = stats.groupby("checkpoint", sort=False)[cols].mean()
    out.insert(2, "paper_r", VITB_RMS_TOKEN_NORM)
    return out


def changed_rankings(model_name: str, tasks, values, change, column: str, protocols, *,
              source: str, data_root: str, n_pairs: int) -> pd.DataFrame:
    """``plasticity.ranking`` of the final model changed by ``change(model, value)``, per value
    (a column named ``column``), task and protocol. At value 1 (no change) the rates are
    ``empirical.measure_tasks``'s cached ones (the same pairs: read, not measured, after
    notebook 02's section 1)."""
    from vitplast import empirical, models

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


def gauge_rankings(model_name: str, tasks, cs=(1.0, 8.0), *, protocols=("embedding", "hidden"),
                   source: str = SOURCE, data_root: str = "", n_pairs: int = 256,
                   root=None) -> pd.DataFrame:
    """The ranking of the same network at each gauge c (``gauge.gauge``: same function),
    per task and protocol (load-or-compute; with ``root``, kept beside a study there:
    ``kept.kept_table``): ``plasticity.ranking`` with a ``c`` column.

    Paper: Takeaway 2 (its order, Fig. 2) read against a free scale. Used by notebook 02."""
    from vitplast import gauge
    from vitplast.experiments.kept import kept_table
    from vitplast.measure.relative import weights_id

    key = dict(model_name=model_name, tasks=list(tasks), cs=list(cs), protocols=list(protocols),
               source=source, data_root=data_root, n_pairs=n_pairs, weights=weights_id(model_name))
    return kept_table("gauge-rankings", key, lambda: changed_rankings(
        model_name, tasks, cs, gauge.gauge, "c", protocols, source=source, data_root=data_root,
        n_pairs=n_pairs), root)


def embedding_scale_rankings(model_name: str, tasks, scales=(1.0, 2.0, 4.0, 8.0), *,
                             source: str = SOURCE, data_root: str = "", n_pairs: int = 256,
                             root=None) -> pd.DataFrame:
    """The ``embedding``-protocol ranking when only the embedding is multiplied by s
    (``gauge.scale_embedding``; not function-preserving: what this protocol sees of the gauge),
    per task (load-or-compute; with ``root``, kept beside a study there:
    ``kept.kept_table``): ``plasticity.ranking`` with a ``scale`` column.

    Paper: Fig. 2's protocol, its r = 19.4 vs this model's. Used by notebook 02."""
    from vitplast import gauge
    from vitplast.experiments.kept import kept_table
    from vitplast.measure.relative import weights_id

    key = dict(model_name=model_name, tasks=list(tasks), scales=list(scales), source=source,
               data_root=data_root, n_pairs=n_pairs, weights=weights_id(model_name))
    return kept_table("embedding-scale-rankings", key, lambda: changed_rankings(
        model_name, tasks, scales, gauge.scale_embedding, "scale", ("embedding",),
        source=source, data_root=data_root, n_pairs=n_pairs), root)


def beside_fig2(ranked: pd.DataFrame, by: str | None = "c") -> pd.DataFrame:
    """Per component: the paper's Fig. 2 value beside the measured plasticity (mean over
    tasks) for each (protocol, ``by``) of a ranking table (``by`` None: per protocol). Used by
    notebooks 01 and 02."""
    from vitplast.paper import FIG2_PLASTICITY, PLASTICITY_ORDER

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
    from scipy import stats

    from vitplast.paper import FIG2_PLASTICITY, PLASTICITY_ORDER

    return g.groupby("task").apply(lambda t: stats.spearmanr(
        t.set_index("component").loc[list(PLASTICITY_ORDER), "plasticity"],
        [FIG2_PLASTICITY[c] for c in PLASTICITY_ORDER]).statistic, include_groups=False)


def _factor_deviation(ranked: pd.DataFrame, protocol: str) -> tuple[float, int]:
    """Largest |measured ratio / derived factor - 1| over tasks and components with a derived
    factor, between the largest c and c = 1 (and the number of tasks)."""
    from vitplast.measure.gauge import RATE_FACTORS

    g = ranked[ranked["protocol"] == protocol]
    c = g["c"].max()
    wide = g.pivot_table(index=["task", "component"], columns="c", values="plasticity",
                         observed=True)
    dev = [abs(r[c] / r[1.0] / RATE_FACTORS[protocol][comp](c) - 1)
           for (_, comp), r in wide.iterrows() if RATE_FACTORS[protocol][comp] is not None]
    return float(max(dev)), g["task"].nunique()


def ranking_findings(gauged: pd.DataFrame | None, embedding_scaled: pd.DataFrame | None = None,
                     *, tested: bool = True, token_ratio: float | None = None) -> list[dict]:
    """Notebook 02b's rows on the gauge (``findings.table`` makes them a table with the rest):
    per protocol and c, the order (descriptive) and its Spearman correlation with Fig. 2 over
    tasks (tested; left out with ``tested=False``, for a Read cell before the whole table
    exists); the rate factors the gauge was derived to give; per embedding scale, the order
    (descriptive), the scale nearest ``token_ratio`` (``tokens.token_scale``'s ratio: ViT-B's
    token scale over this model's) named in its verdict. None: no rows of that table.

    Paper: Takeaway 2, Fig. 2."""
    from vitplast import findings
    from vitplast.paper import PLASTICITY_ORDER, SOURCES

    paper_order, rows = " > ".join(PLASTICITY_ORDER), []
    rows += _scaled_rows(embedding_scaled, token_ratio) if embedding_scaled is not None else []
    if gauged is None:
        return rows
    for (protocol, c), g in gauged.groupby(["protocol", "c"]):
        text = orders(g).iloc[0, 0]
        rows.append(findings.descriptive(
            f"order at gauge c = {c:g} [{protocol}]", text,
            paper=f"{paper_order}, {SOURCES['fig2']}",
            verdict=findings.same(text == paper_order), n=g["task"].nunique(), unit="(tasks)"))
        rows += [findings.correlation_row(
            f"Spearman(measured, Fig. 2) at gauge c = {c:g} [{protocol}]", spearman_fig2(g),
            paper=f"+1 (same order), {SOURCES['fig2']}")] if tested else []
    for protocol in gauged["protocol"].unique():
        dev, n = _factor_deviation(gauged, protocol)
        mha = ", MHA x c" if protocol == "hidden" else ""
        rows.append(findings.descriptive(
            f"rate factors of the gauge (LN / c, FC1 x 1, FC2 x c{mha}): largest relative "
            f"deviation [{protocol}]", dev, paper="not studied (derived here)",
            verdict="as derived" if dev < 0.02 else "not as derived", n=n, unit="(tasks)"))
    return rows


def _scaled_rows(scaled: pd.DataFrame, token_ratio: float | None) -> list[dict]:
    """Per embedding scale s: the order (mean over tasks), the paper's beside; the s nearest
    ``token_ratio`` on a log scale says so in its verdict."""
    from vitplast import findings
    from vitplast.paper import PLASTICITY_ORDER, SOURCES

    paper_order, scales = " > ".join(PLASTICITY_ORDER), sorted(scaled["scale"].unique())
    near = (min(scales, key=lambda s: abs(math.log(s / token_ratio)))
            if token_ratio else None)
    rows = []
    for s, g in scaled.groupby("scale"):
        text = orders(g, by="scale").iloc[0, 0]
        where = (f"; s = {s:g} is the scale nearest ViT-B's tokens (x{token_ratio:.2f})"
                 if s == near else "")
        rows.append(findings.descriptive(
            f"order with the embedding times {s:g} [embedding]", text,
            paper=f"{paper_order}, {SOURCES['fig2']}",
            verdict=("the paper's order" if text == paper_order else "not the paper's order")
            + where, n=g["task"].nunique(), unit="(tasks)"))
    return rows


def finetuning_invariance(model_name: str = "", task: str = "digits",
                          configs=("LN1", "FC1", "MHA", "FC2"), c: float = 8.0, *, steps: int = 8,
                          batch_size: int = 16, lr: float = 0.1, seed: int = 0,
                          root=None) -> pd.DataFrame:
    """Whole loss histories of short finetuning runs of the gauged and the original model
    (load-or-compute): per configuration, the largest |loss difference| over the steps of
    the gauged run (recipe: SGD, momentum, clip 1.0, new head) against the original run
    (``vs_original``), and, where the configuration trains gauged parameters, against the
    original with their LR / c^2 (``gauge.finetuning_equivalence``) with the clip
    (``vs_lr_scaled_clip``) and without it in both runs (``vs_lr_scaled_noclip``);
    ``max_grad_norm`` of the original run (the clip acts above 1). With ``root``, kept
    beside a study there (``kept.kept_table``).

    Paper: Takeaway 3's configurations (section 5's recipe). Used by notebook 02."""
    import copy

    from vitplast import finetune, gauge, models
    from vitplast import tasks as tasks_
    from vitplast.experiments.kept import kept_table
    from vitplast.measure.relative import weights_id

    model_name = model_name or models.EMBEDDED_NAME

    def compute():
        t = tasks_.load(task)
        start = models.new_head(models.load_model(model_name), t.num_classes, seed=seed)

        def losses(config, c_, lr_scales=None, clip=1.0):
            model = gauge.gauge(copy.deepcopy(start), c_)
            res = finetune.train(model, t.train, config=config, steps=steps, batch_size=batch_size,
                                 lr=lr, warmup_steps=0, log_every=1, eval_every=10 * steps,
                                 clip_grad_norm=clip, lr_scales=lr_scales, seed=seed,
                                 progress=False)
            return (np.array([r["loss"] for r in res.history]),
                    np.array([r["grad_norm"] for r in res.history]))

        rows = []
        for config in configs:
            (base, norms), (gauged, _) = losses(config, 1.0), losses(config, c)
            row = dict(config=config, vs_original=np.abs(gauged - base).max(),
                       max_grad_norm=norms.max())
            scales = gauge.finetuning_equivalence(start, config, c)
            if scales:
                row["vs_lr_scaled_clip"] = np.abs(gauged - losses(config, 1.0, scales)[0]).max()
                row["vs_lr_scaled_noclip"] = np.abs(losses(config, c, clip=None)[0] - losses(
                    config, 1.0, scales, clip=None)[0]).max()
            rows.append(row)
        return pd.DataFrame(rows)

    key = dict(model_name=model_name, task=task, configs=list(configs), c=c, steps=steps,
               batch_size=batch_size, lr=lr, seed=seed, weights=weights_id(model_name))
    return kept_table("gauge-finetuning", key, compute, root)


def invariance_findings(inv: pd.DataFrame, tol: float = 5e-3) -> list[dict]:
    """Rows on ``finetuning_invariance``: per configuration, the largest loss difference from
    the original run (the same trajectory where no gauged parameter trains), from the LR / c^2
    run with the recipe's clip and without any clip (the same where derived). ``tol``: a loss
    difference below it reads as the same trajectory; the gauge keeps LayerNorm's eps, whose
    effect (about 5e-4 in the logits at c = 8 on the embedded model) a few SGD steps amplify
    to at most ~1e-3 there, while the LR and clip effects measured are above 2e-2."""
    from vitplast import findings

    rows = []
    for _, r in inv.iterrows():
        for col, what in (("vs_original", "the original run"),
                          ("vs_lr_scaled_clip", "the LR / c^2 run, recipe's clip"),
                          ("vs_lr_scaled_noclip", "the LR / c^2 run, no clip")):
            if col in r and not pd.isna(r[col]):
                rows.append(findings.descriptive(
                    f"{r['config']}-only finetuning, gauged vs {what}: largest |loss difference|",
                    float(r[col]), paper="not studied (derived here)", n=1, unit="(run pair)",
                    verdict="same trajectory (within LayerNorm's eps)" if r[col] < tol
                    else "different trajectory"))
    return rows


def findings_table(found: pd.DataFrame, rows: list[dict]) -> pd.DataFrame:
    """A notebook's findings table with ``rows`` added: one table, Holm over all its tests."""
    from vitplast import findings

    return findings.table(found.to_dict("records") + rows)


__all__ = ["attention_entropy", "model_statistics", "stream_statistics", "gauge_rankings",
           "embedding_scale_rankings", "beside_fig2", "orders", "ranking_findings",
           "findings_table", "finetuning_invariance", "long_statistics", "invariance_findings",
           "by_checkpoint"]
