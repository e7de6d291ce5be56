"""The confound study: does plasticity or the trainable-parameter count drive the gap?

Paper: objections 3 and 4 of PAPER.md. The experiments are named variants of the finetuning
configurations, built from the model changes of ``vitplast.ablations`` and run through the
same sweep and results store as the main study; this module also chooses the LayerNorm
scales, checks them, and turns the results into verdicts.

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
from vitplast.components import COMPONENTS, count_parameters, trainable_names

#: Where the embedded confound study is shipped (one JSON per run, and its scales).
EMBEDDED_RESULTS = models.results_root("confounds")

#: The plain configurations: the study's SGD baselines (runs of the main study) and its AdamW runs.
PLAIN_CONFIGS = ("head", "LN1", "LN2", "MHA", "FC1", "FC2", "full")


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
    """Every named variant a study part can train (``studies.CONFOUNDS``): the ablations of
    ``variants``, the single-block configurations of ``layer_variants`` and the plain
    configurations (``PLAIN_CONFIGS``), as ``run_config`` keywords."""
    return {**variants(model, scales), **layer_variants(model),
            **{c: dict(config=c) for c in PLAIN_CONFIGS}}


def study_runs(study: dict, root: str | Path = EMBEDDED_RESULTS) -> list[dict]:
    """Every run of a confound study preset (``studies.CONFOUNDS``), part by part in its
    order, with the LayerNorm scales stored under ``root`` (``study_scales``).

    Raises:
        ValueError: an ``lrs`` name or pattern of a part that matches no variant.
    """
    from vitplast import runs

    scales = study_scales(root, study["scale_tasks"], target=study["target"],
                          n_pairs=study["n_pairs"])["scales"]
    table = all_variants(models.load_model(models.EMBEDDED_NAME, num_classes=10), scales)
    out = []
    for part in study["parts"]:
        for pattern, lrs in part["lrs"].items():
            names = [n for n in table if fnmatch.fnmatch(n, pattern)]
            if not names:
                raise ValueError(f"part {part['name']!r}: {pattern!r} matches no variant; "
                                 f"valid: {list(table)}")
            out += [run for task in part["tasks"] for name in names
                    for run in runs.grid([task], [table[name]], lrs, study["seeds"],
                                         **part.get("fixed", {}))]
    return out


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
    return {ln: float(p[target] / p[ln]) for ln in ("LN1", "LN2")}


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
    path = Path(root) / f"scales-{store.config_hash(settings)}.json"
    saved = store.read_json(path)
    if saved is None:
        rates = empirical.measure_tasks(models.EMBEDDED_NAME, list(tasks), protocols=["hidden"],
                                        n_pairs=n_pairs)
        ranked = plasticity.ranking(rates)
        scales = matching_scales(ranked, target)
        p = ranked.groupby("component", observed=True)["plasticity"].mean()
        saved = dict(settings, plasticity=p.to_dict(),
                     scales={ln: float(f"{c:.3g}") for ln, c in scales.items()})
        store.write_json(path, saved)
    return saved


@torch.no_grad()
def check_rescale(model: nn.Module, x: torch.Tensor, y: torch.Tensor, scales: dict[str, float]
                  ) -> pd.DataFrame:
    """For each LayerNorm and its c: plasticity before and after the preserved rescale
    (hidden protocol, mean over layers), their ratio (should be c), and the largest output
    change of the preserved (should be ~0) and raw (should not) variants."""
    from vitplast import plasticity

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
                           "best_val_acc") if c in df.columns]]


def verdicts(df: pd.DataFrame, scales: dict[str, float], target: str = "FC1", on: str = "val",
             alpha: float = 0.05) -> pd.DataFrame:
    """The questions of notebook 05, answered from ``with_variant`` results: each compares
    two variants paired on (task, seed) at their selected LRs (``results.paired_tests``).

    Columns: ``question``, ``a``, ``b``, ``n_pairs``, ``diff_pp`` (mean of acc(a) - acc(b)
    over the pairs, in points), ``ci95_pp`` (half-width of its 95% t interval), ``t_p``
    (paired t-test, two-sided), ``verdict``: the better one when ``t_p < alpha``, else "no
    significant difference"; a single pair gives no noise estimate, and the verdict says so
    ("no difference" when its two accuracies are equal).
    """
    from vitplast import results

    runs, rows = _outcomes(df), []

    def ask(question, a, b):
        both = runs[runs["variant"].isin([a, b])]
        tests = results.paired_tests(both, reference=a, on=on, by="variant").set_index("variant")
        r = tests.loc[b] if b in tests.index else dict(n_pairs=0, mean_diff_pp=np.nan,
                                                           ci95_pp=np.nan, t_p=np.nan)
        d, p, n = r["mean_diff_pp"], r["t_p"], r["n_pairs"]
        better = f"{a if d > 0 else b} better"
        if n < 2:  # no noise estimate
            verdict = ("no data" if n == 0 else "no difference" if d == 0
                       else f"{better} (no noise estimate yet)")
        else:
            verdict = better if p < alpha else "no significant difference"
        rows.append(dict(question=question, a=a, b=b, n_pairs=int(n), diff_pp=d,
                         ci95_pp=r["ci95_pp"], t_p=p, verdict=verdict))

    for ln, c in scales.items():
        pres = f"{ln} x {c:.3g} (preserved)"
        ask(f"does raising {ln}'s plasticity x{c:.3g} help?", pres, ln)
        ask(f"does it close the gap to {target}?", pres, target)
        ask("is it just the effective LR (preserved vs lr/c^2 control)?", pres,
            f"{ln} lr/c^2 (c={c:.3g})")
        ask(f"does the raw rescale of {ln} change it?", f"{ln} x {c:.3g} (raw)", ln)
    for kind in ("sparse", "LoRA r1", "bias"):
        ask(f"at a matched budget ({kind}), does MHA beat FC1?", f"MHA {kind}", f"FC1 {kind}")
        ask(f"at a matched budget ({kind}), does FC1 beat FC2?", f"FC1 {kind}", f"FC2 {kind}")
    ask("at LN1's count, does sparse MHA beat LN1?", "MHA sparse", "LN1")
    ask("under AdamW, does MHA beat LN1?", "MHA (AdamW)", "LN1 (AdamW)")
    for config in PLAIN_CONFIGS:
        ask(f"does AdamW beat SGD for {config}?", f"{config} (AdamW)", config)
    return pd.DataFrame(rows, columns=["question", "a", "b", "n_pairs", "diff_pp", "ci95_pp",
                                       "t_p", "verdict"])


def what_this_shows(checks: pd.DataFrame, verdict: pd.DataFrame, cover: dict) -> str:
    """Notebook 05's conclusions, computed from its tables."""
    lines = [f"Runs: {cover}."]
    for r in checks.itertuples():
        lines.append(f"{r.component} x {r.c:.3g}: plasticity x{r.ratio:.3g} (expected x{r.c:.3g});"
                     f" output change preserved {r.max_output_change_preserved:.1e}, raw "
                     f"{r.max_output_change_raw:.1e}.")
    for r in verdict.itertuples():
        if r.n_pairs:
            noise = (f"95% CI +- {r.ci95_pp:.2f}, paired t p = {r.t_p:.2g}, " if r.n_pairs > 1
                     else "")
            lines.append(f"{r.question[0].upper()}{r.question[1:]} {r.a} - {r.b} = "
                         f"{r.diff_pp:+.2f} points ({noise}{r.n_pairs} (task, seed) pairs): "
                         f"{r.verdict}.")
        else:
            lines.append(f"{r.question}: no data yet.")
    lines += _headline(verdict)
    return "\n".join(lines)


def _headline(verdict: pd.DataFrame) -> list[str]:
    """The issue's two questions, answered from the verdict rows."""
    out = []
    for r in verdict[verdict["question"].str.startswith("does it close the gap")].itertuples():
        ln = r.a.split()[0]
        answer = {f"{r.b} better": "no, it stays below", f"{r.a} better": "yes, it overtakes",
                  "no data": "no data yet on"}.get(r.verdict, "not resolved against")
        out.append(f"Does raising {ln}'s plasticity at a fixed parameter count close the gap to "
                   f"{r.b}? {answer} {r.b}.")
    said = verdict.set_index(["a", "b"])["verdict"]
    for kind in ("sparse", "LoRA r1", "bias"):
        steps = [(f"MHA {kind}", f"FC1 {kind}"), (f"FC1 {kind}", f"FC2 {kind}")]
        found = [said.get(step, "no data") for step in steps]
        if "no data" in found:
            continue
        state = ("kept" if all(v == f"{a} better" for (a, _), v in zip(steps, found))
                 else "broken" if any(v == f"{b} better" for (_, b), v in zip(steps, found))
                 else "not resolved (a step is not significant, or has one pair)")
        out.append(f"Matched budget ({kind}): the paper's MHA > FC1 > FC2 order is {state}.")
    return out
