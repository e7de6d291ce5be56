"""The confound study: does plasticity or the trainable-parameter count drive the gap?

Paper: objections 3 and 4 (docs/objections.md). The experiments are named variants of the finetuning
configurations (``all_variants``: the model changes of ``vitplast.ablations``, single-block
configurations, the plain ones), trained by the parts of a study preset
(``studies.get("confounds")``, ``part_runs``) through the same sweep and results store as the main
study. This module also measures what the study needs before finetuning (the LayerNorm
scales; per-block plasticity, and plasticity after finetuning, in ``vitplast.confound_plasticity``,
re-exported here) and turns the results into the tables behind notebook 05's findings
(``tables``; the findings themselves: ``vitplast.findings.confounds``).

Used by notebook 05.
"""

from __future__ import annotations

import copy
import fnmatch
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from vitplast import models, store
from vitplast.ablations import (
    BIAS_ONLY,
    LORA_PATTERNS,
    LORA_TARGETS,
    PREPARE,
    bias_count,
    lora_count,
    rescale_layernorm,
)
from vitplast.components import (
    COMPONENTS,
    LINEARS,
    NORMS,
    PAPER_CONFIGS,
    count_parameters,
    trainable_names,
)
from vitplast.confound_plasticity import (  # noqa: F401 (re-exported)
    AFTER_COLUMNS,
    after_runs,
    layer_accuracy,
    layer_correlations,
    layer_plasticity,
    partial_correlation,
    plasticity_after,
)
from vitplast.inputs import to_model

#: Where the embedded confound study is shipped (one JSON per run, and its scales).
EMBEDDED_RESULTS = models.results_root("confounds")


def variants(model: nn.Module, scales: dict[str, float], budget_from: str = "LN1",
             lora_rank: int = 1) -> dict[str, dict]:
    """The confound experiments as named variants: ``run_config`` keywords for each.

    - ``<LN> x c (preserved)`` / ``<LN> x c (raw)``: LayerNorm rescaled by ``scales[LN]``.
    - ``<LN> lr/c^2``: the plain LayerNorm with its learning rate divided by c^2: under SGD
      without gradient clipping exactly what the preserved rescale does to it; with the
      recipe's global clip, close to it only as far as the LayerNorm's share of the global
      gradient norm is small (``vitplast.ablations``): the control.
    - ``<C> sparse``: MHA / FC1 / FC2 with exactly ``budget_from``'s trainable count.
    - ``<C> LoRA r``: rank-``lora_rank`` adapters on MHA / FC1 / FC2, masked down to the
      smallest of the three counts (MHA's adapters are larger), so all three train exactly as
      many backbone entries.
    - ``<C> bias``: only the biases of each component (BitFit-style), masked down to the
      smallest count among them (FC2's and the LayerNorms' betas: d per block), so every bias
      variant trains exactly as many backbone entries.

    Each ablation dict holds the ``count`` of backbone entries it trains.

    The variant's name is stored in the run's ``ablation["variant"]``.
    """
    out: dict[str, dict] = {}
    for ln, c in scales.items():
        path = COMPONENTS[ln]
        for preserve in (True, False):
            name = f"{ln} x {c:.3g} ({'preserved' if preserve else 'raw'})"
            out[name] = dict(config=ln, prepare="rescale_ln", ablation=dict(
                variant=name, component=ln, c=c, preserve=preserve))
        name = f"{ln} lr/c^2 (c={c:.3g})"
        out[name] = dict(config=ln, lr_scales={f"blocks.*.{path}.*": 1 / c**2},
                         ablation=dict(variant=name))
    budget = count_parameters(model, budget_from)
    lora = min(lora_count(model, comp, lora_rank) for comp in LORA_TARGETS)
    bias = min(bias_count(model, comp) for comp in COMPONENTS)
    for comp in LORA_TARGETS:
        out[f"{comp} sparse"] = dict(config=comp, prepare="sparse", ablation=dict(
            variant=f"{comp} sparse", component=comp, count=budget))
        out[f"{comp} LoRA r{lora_rank}"] = dict(config=LORA_PATTERNS, prepare="lora", ablation=dict(
            variant=f"{comp} LoRA r{lora_rank}", component=comp, rank=lora_rank, count=lora))
    for comp in COMPONENTS:
        out[f"{comp} bias"] = dict(config=BIAS_ONLY[comp], prepare="sparse", ablation=dict(
            variant=f"{comp} bias", component=comp, count=bias))
    return out


def layer_variants(model: nn.Module, components=("LN1", "MHA", "FC1")) -> dict[str, dict]:
    """One block's component at a time: ``<C> block <k>`` trains only block k's C (and the
    head): the trainable count is fixed within a component while its plasticity varies
    across layers (the per-layer test of notebook 05)."""
    from vitplast.components import COMPONENTS

    return {f"{comp} block {k}": dict(config=[f"blocks.{k}.{COMPONENTS[comp]}.*"], ablation=dict(
                variant=f"{comp} block {k}", component=comp, block=k))
            for comp in components for k in range(len(model.blocks))}


def all_variants(model: nn.Module, scales: dict[str, float]) -> dict[str, dict]:
    """Every named variant a study part can train (the confound study's spec): the ablations of
    ``variants``, the single-block configurations of ``layer_variants`` and the plain
    configurations (``PAPER_CONFIGS``), as ``run_config`` keywords."""
    return {**variants(model, scales), **layer_variants(model),
            **{c: dict(config=c) for c in PAPER_CONFIGS}}


def part_runs(study: dict, root: str | Path = EMBEDDED_RESULTS) -> dict[str, list[dict]]:
    """The runs of each part of a confound study's spec (``studies.get("confounds").spec``),
    in its order, with the LayerNorm scales stored under ``root`` (``study_scales``).

    Raises:
        ValueError: an ``lrs`` name or pattern of a part that matches no variant.
    """
    from vitplast import runs

    scales = study_scales(root, study["scale_tasks"], target=study["target"],
                          n_pairs=study["n_pairs"])["scales"]
    table = all_variants(models.load_model(models.EMBEDDED_NAME, num_classes=10), scales)
    out = {}
    for part in study["parts"]:
        out[part["name"]] = []
        for pattern, lrs in part["lrs"].items():
            names = [n for n in table if fnmatch.fnmatch(n, pattern)]
            if not names:
                raise ValueError(f"part {part['name']!r}: {pattern!r} matches no variant; "
                                 f"valid: {list(table)}")
            out[part["name"]] += [run for task in part["tasks"] for name in names
                                  for run in runs.grid([task], [table[name]], lrs,
                                                       study["seeds"], **part.get("fixed", {}))]
    return out


def study_runs(study: dict, root: str | Path = EMBEDDED_RESULTS) -> list[dict]:
    """Every run of a confound study preset, part by part (``part_runs``)."""
    return [run for part in part_runs(study, root).values() for run in part]


def part_coverage(study: dict, df: pd.DataFrame, root: str | Path = EMBEDDED_RESULTS
                  ) -> pd.DataFrame:
    """Per part of the study: its expected runs by status in ``results`` table ``df``."""
    from vitplast import results

    rows = [dict(part=name, **results.coverage(df, expected))
            for name, expected in part_runs(study, root).items()]
    return pd.DataFrame(rows).fillna(0).set_index("part").astype(int)


def variant_counts(model: nn.Module, table: dict[str, dict]) -> pd.DataFrame:
    """Exact trainable counts (head and final norm included) of each variant of ``variants``
    on ``model``: each is prepared on a copy and counted as ``finetune.train`` counts."""
    rows = []
    for name, kw in table.items():
        m = copy.deepcopy(model)
        extra = PREPARE[kw["prepare"]](m, kw) if kw.get("prepare") else None
        names = set(trainable_names(m, kw["config"]))
        n = sum(p.numel() for k, p in m.named_parameters() if k in names)
        n -= sum(mk.numel() - int(mk.sum()) for mk in (extra or {}).get("grad_masks", {}).values())
        rows.append(dict(variant=name, trainable=n))
    return pd.DataFrame(rows)


def matching_scales(ranked: pd.DataFrame, target: str = "FC1") -> dict[str, float]:
    """c per LayerNorm so that its plasticity (mean over layers and tasks, from
    ``plasticity.ranking``) matches ``target``'s: c = P(target) / P(LN)."""
    p = ranked.groupby("component", observed=True)["plasticity"].mean()
    return {ln: float(p[target] / p[ln]) for ln in NORMS}


def study_scales(root: str | Path, tasks, *, target: str = "FC1", n_pairs: int = 256) -> dict:
    """The LayerNorm scales of the study stored under ``root``, measured once.

    The embedded model's plasticity (hidden protocol, ``n_pairs`` per task) gives
    ``matching_scales``, rounded to 3 significant digits (the precision of the variant names),
    and everything is saved in ``root/scales-<hash of the settings>.json``. Later calls, and
    resumed sweeps, read that file: float noise of a re-measurement never changes a run's
    config, so its hash stays.

    Returns:
        ``tasks``, ``target``, ``n_pairs``, ``plasticity`` (mean per component) and
        ``scales`` (LayerNorm -> c).
    """
    from vitplast import empirical, plasticity

    settings = dict(tasks=list(tasks), target=target, n_pairs=n_pairs)
    name = f"scales-{store.config_hash(settings)}.json"
    saved = store.Store(root).companion(name)
    if saved is None:
        rates = empirical.measure_tasks(models.EMBEDDED_NAME, list(tasks), protocols=["hidden"],
                                        n_pairs=n_pairs)
        ranked = plasticity.ranking(rates)
        scales = matching_scales(ranked, target)
        p = ranked.groupby("component", observed=True)["plasticity"].mean()
        saved = dict(settings, plasticity=p.to_dict(),
                     scales={ln: float(f"{c:.3g}") for ln, c in scales.items()})
        store.Store(root).write_companion(name, saved)
    return saved


@torch.no_grad()
def check_rescale(model: nn.Module, x: torch.Tensor, y: torch.Tensor, scales: dict[str, float]
                  ) -> pd.DataFrame:
    """For each LayerNorm and its c: plasticity before and after the preserved rescale
    (hidden protocol, mean over layers), their ratio (should be c), and the largest output
    change of the preserved (should be ~0) and raw (should not) variants. x and y are moved
    to the model's device."""
    from vitplast import plasticity

    x, y = to_model(model, x, y)
    base = plasticity.batch_rates(model, x, y)
    out0 = model(x)
    rows = []
    for ln, c in scales.items():
        preserved = rescale_layernorm(copy.deepcopy(model), ln, c, preserve=True)
        raw = rescale_layernorm(copy.deepcopy(model), ln, c, preserve=False)
        after = plasticity.batch_rates(preserved, x, y)
        layers = [k for k in base if k[1] == ln]
        before_p = float(np.mean([base[k].mean().item() for k in layers]))
        after_p = float(np.mean([after[k].mean().item() for k in layers]))
        rows.append(dict(component=ln, c=c, plasticity_before=before_p, plasticity_after=after_p,
                         ratio=after_p / before_p,
                         max_output_change_preserved=(preserved(x) - out0).abs().max().item(),
                         max_output_change_raw=(raw(x) - out0).abs().max().item()))
    return pd.DataFrame(rows)


#: What a study part changes in the recipe -> the suffix its variants' names take.
SUFFIXES = {"optimizer": ("adamw", " (AdamW)"), "clip_grad_norm": (0.0, " (no clip)"),
            "checkpoint": ("init", " (init)")}


def with_variant(df: pd.DataFrame) -> pd.DataFrame:
    """Results with a ``variant`` column: the ablation's name, else the configuration, with
    a suffix per recipe change of ``SUFFIXES`` (e.g. ``"MHA (AdamW)"``, ``"LN1 (init)"``)."""
    name = df["config"].astype(str)
    if "ablation.variant" in df:
        name = df["ablation.variant"].fillna(name)
    for key, (value, suffix) in SUFFIXES.items():
        if key in df:
            name = name.where(df[key] != value, name + suffix)
    return df.assign(variant=name)


def rescale_pairs(df: pd.DataFrame) -> pd.DataFrame:
    """Each preserved gamma rescale against its lr/c^2 control, run by run: the two runs of one
    (task, LR, seed) in ``with_variant`` results ``df``. Without gradient clipping they are the
    same run in exact arithmetic (``vitplast.ablations``); with it, they need not be.

    Returns:
        Per preserved variant: ``variant``, ``clipping`` (``"on"``, ``"off"``), ``pairs``,
        ``identical`` (pairs with the same status and the same test accuracy) and
        ``max_diff`` (largest |difference| of test accuracy in points over pairs both ok).
    """
    rows = []
    for variant in sorted(v for v in df["variant"].unique() if "(preserved)" in v):
        ln, c = variant.split()[0], variant.split()[2]
        clip = "off" if variant.endswith(SUFFIXES["clip_grad_norm"][1]) else "on"
        control = f"{ln} lr/c^2 (c={c})" + (SUFFIXES["clip_grad_norm"][1] if clip == "off" else "")
        runs = [df[df["variant"] == v].set_index(["task", "lr", "seed"])[["status", "test_acc"]]
                for v in (variant, control)]
        both = runs[0].merge(runs[1], left_index=True, right_index=True,
                             suffixes=("", "_control"))
        same = both["status"].eq(both["status_control"]) & (
            both["test_acc"].eq(both["test_acc_control"])
            | (both["test_acc"].isna() & both["test_acc_control"].isna()))
        diff = 100 * (both["test_acc"] - both["test_acc_control"]).abs()
        rows.append(dict(variant=variant, clipping=clip, pairs=len(both),
                         identical=int(same.sum()), max_diff=float(diff.max())))
    return pd.DataFrame(rows, columns=["variant", "clipping", "pairs", "identical", "max_diff"])


def complete_settings(df: pd.DataFrame, expected: list[dict]) -> pd.DataFrame:
    """The rows of ``with_variant`` results ``df`` whose (task, variant) setting has every run
    of ``expected`` stored (ok or diverged): an LR chosen on a ladder still filling would
    mislead. A study filling over sessions shows its findings setting by setting."""
    want = with_variant(pd.json_normalize(expected)).groupby(["task", "variant"]).size()
    done = df[df["status"].isin(["ok", "diverged"])].groupby(["task", "variant"]).size()
    full = [k for k, n in want.items() if done.get(k, 0) >= n]
    return df[pd.MultiIndex.from_frame(df[["task", "variant"]]).isin(full)] if len(df) else df


def variant_table(df: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """Per task x variant: the LR chosen on ``on`` and test accuracy mean and std over seeds
    (in %), from ``with_variant`` results (``vitplast.results.main_table`` per variant)."""
    from vitplast import results

    table = results.main_table(_outcomes(df), on=on)
    return table[table["task"] != "average"].reset_index(drop=True)


def _outcomes(df: pd.DataFrame) -> pd.DataFrame:
    """Only the columns that name a run's setting by its variant, and its outcome: so that LR
    selection groups by (task, variant) and nothing else."""
    return df[[c for c in ("task", "variant", "lr", "seed", "status", "run", "test_acc",
                           "test_loss", "best_val_acc", "best_val_loss") if c in df.columns]]


def accuracy(df: pd.DataFrame, on: str = "val") -> pd.DataFrame:
    """``variant_table`` as tasks x variants: seed-mean test accuracy (%) at the LR chosen on
    ``on``; NaN where a variant lacks a task. The task is the unit of every finding."""
    table = variant_table(df, on)
    return table.pivot_table(index="task", columns="variant", values="test_acc_mean")


#: Matched families (notebook 05's first figure): family -> (variant name template, members).
FAMILIES = {"full count": ("{}", LINEARS + NORMS),
            "LN1's count (sparse)": ("{} sparse", LINEARS),
            "rank-1 LoRA, one count": ("{} LoRA r1", LINEARS),
            "bias only, one count": ("{} bias", LINEARS)}


def matched_accuracy(acc: pd.DataFrame) -> pd.DataFrame:
    """``accuracy`` of the matched families (``FAMILIES``) as a long table: ``task``,
    ``family``, ``component``, ``test_acc`` (%), for the variants that have runs."""
    rows = [dict(task=task, family=family, component=comp, test_acc=acc.at[task, name])
            for family, (template, comps) in FAMILIES.items() for comp in comps
            for name in [template.format(comp)] if name in acc for task in acc.index
            if pd.notna(acc.at[task, name])]
    return pd.DataFrame(rows, columns=["task", "family", "component", "test_acc"])


def tables(res, model: nn.Module) -> dict:
    """Every table behind notebook 05's findings, from ``studies.load_confounds``'s ``res``:
    ``acc`` (``accuracy``), ``matched`` (``matched_accuracy``), ``counts``
    (``variant_counts_table``) and ``count_matrix`` (its matched families: family x
    component), ``layers`` (per-layer plasticity and accuracy), ``rescale``
    (``rescale_pairs``), ``corr``
    (``layer_correlations``), ``grad_norms`` (``results.component_grad_norms`` of every run),
    ``grads`` (``results.grad_norms_by_task`` of the plain configurations), ``ties``
    (``results.lr_ties``) and ``alternatives`` (the LR-dependent tables again, once per tied
    choice broken the other way: ``results.tie_alternatives``)."""
    from vitplast import results

    curves = results.history(res.root, res.main_root)
    counts = variant_counts_table(model, res.scales["scales"])
    out = dict(_selected_tables(res.runs, res.layers, curves), counts=counts,
               count_matrix=pd.DataFrame({family: {c: counts[template.format(c)] for c in comps}
                                          for family, (template, comps) in FAMILIES.items()}
                                         ).T.astype("Int64"),
               rescale=rescale_pairs(res.runs), ties=results.lr_ties(_outcomes(res.runs)))
    # ties are found where LRs are chosen, by (task, variant); each alternative moves one
    out["alternatives"] = [dict(_selected_tables(res.runs.assign(best_val_acc=alt[
        "best_val_acc"]), res.layers, curves), counts=counts, rescale=out["rescale"])
        for alt in results.tie_alternatives(_outcomes(res.runs))]
    return out


def _selected_tables(runs: pd.DataFrame, layers: pd.DataFrame, curves: pd.DataFrame) -> dict:
    """The tables of ``tables`` that depend on the LR choices: ``acc``, ``matched``,
    ``layers``, ``corr``, ``grad_norms``, ``grads``."""
    from vitplast import results

    acc = accuracy(runs)
    norms = results.component_grad_norms(results.dynamics(runs, curves))
    plain = norms[norms["variant"].isin(PAPER_CONFIGS)]
    return dict(acc=acc, matched=matched_accuracy(acc), layers=layer_accuracy(acc, layers),
                corr=layer_correlations(acc, layers), grad_norms=norms,
                grads=results.grad_norms_by_task(plain))


def variant_counts_table(model: nn.Module, scales: dict[str, float]) -> dict[str, int]:
    """Backbone entries each variant trains (``count`` of its ablation, else its trainable
    parameters but the head and final norm): what every matched finding states."""
    table = all_variants(model, scales)
    total = variant_counts(model, table).set_index("variant")["trainable"]
    head = variant_counts(model, {"head": dict(config="head")})["trainable"].iloc[0]
    return {name: int(total[name] - head) for name in table}
