"""The confound study: does plasticity or the trainable-parameter count drive the gap?

Paper: objections 3 and 4 (docs/objections.md). The experiments are variants of the finetuning
configurations (``all_variants``: the model changes of ``vitplast.train.ablations``, single-block
configurations, the plain ones; each a ``Variant`` of ``vitplast.experiments.confound_variants``),
trained by the parts of a study preset (``studies.get("confounds")``, ``part_runs``) through the
same sweep and results store as the main study. This module also measures what the study needs
before finetuning (the LayerNorm scales:
``measure_scales``, an explicit step that listing the runs only reads; per-block plasticity, and
plasticity after finetuning, in ``vitplast.experiments.confound_plasticity``).
The tables behind notebook 05's findings are ``vitplast.report.confound_tables``'s; the findings
themselves ``vitplast.report.confound_findings``'s.
"""

from __future__ import annotations

import copy
import fnmatch
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from vitplast import cached, files, models
from vitplast.experiments import results, runs, store
from vitplast.experiments.confound_variants import (
    Variant,
    all_variants,
    with_variant,
)
from vitplast.experiments.spec_types import Confound
from vitplast.inputs import to_model
from vitplast.measure import empirical, plasticity, rates
from vitplast.measure.components import NORMS
from vitplast.train.ablations import PREPARE, matching_scale, rescale_layernorm
from vitplast.train.configurations import trainable_names


def part_runs(spec: Confound, root: str | Path | None = None) -> dict[str, list[dict]]:
    """The runs of each part of a confound study's spec (``studies.get("confounds").spec``),
    in its order, with the LayerNorm scales stored under ``root`` (default: where the confound
    study is shipped, ``files.results_root``, as it is when called; read, never measured:
    ``study_scales``). The variants' counts come from the embedded architecture (random
    weights: no checkpoint is read).

    Raises:
        FileNotFoundError: the scales are not measured yet (``measure_scales``, named).
        ValueError: an ``lrs`` name or pattern of a part that matches no variant.
    """
    scales = study_scales(root or files.results_root("confounds"), spec.scale_tasks,
                          target=spec.target, n_pairs=spec.n_pairs)["scales"]
    table = all_variants(models.load_model(models.EMBEDDED_NAME, pretrained=False,
                                           num_classes=10, device="cpu"), scales)
    out = {}
    for part in spec.parts:
        out[part.name] = []
        for pattern, lrs in part.lrs.items():
            names = [n for n in table if fnmatch.fnmatch(n, pattern)]
            if not names:
                raise ValueError(f"part {part.name!r}: {pattern!r} matches no variant; "
                                 f"valid: {list(table)}")
            out[part.name] += [run for task in part.tasks for name in names
                                  for run in runs.grid([task], [table[name].keywords()], lrs,
                                                       spec.seeds, **part.fixed)]
    return out


def study_runs(spec: Confound, root: str | Path | None = None) -> list[dict]:
    """Every run of a confound study preset, part by part (``part_runs``)."""
    return [run for part in part_runs(spec, root).values() for run in part]


def part_coverage(spec: Confound, df: pd.DataFrame, root: str | Path | None = None
                  ) -> pd.DataFrame:
    """Per part of the study: its expected runs by status in ``results`` table ``df``."""
    rows = [dict(part=name, **results.coverage(df, expected))
            for name, expected in part_runs(spec, root).items()]
    return pd.DataFrame(rows).fillna(0).set_index("part").astype(int)


def variant_counts(model: nn.Module, table: dict[str, Variant]) -> pd.DataFrame:
    """Exact trainable counts (head and final norm included) of each variant of ``table``
    (``variants``) on ``model``: each is prepared on a copy and counted as ``finetune.train``
    counts."""
    rows = []
    for name, variant in table.items():
        kw, m = variant.keywords(), copy.deepcopy(model)
        extra = PREPARE[kw["prepare"]](m, kw) if kw.get("prepare") else None
        names = set(trainable_names(m, kw["config"]))
        n = sum(p.numel() for k, p in m.named_parameters() if k in names)
        n -= sum(mk.numel() - int(mk.sum()) for mk in (extra or {}).get("grad_masks", {}).values())
        rows.append(dict(variant=name, trainable=n))
    return pd.DataFrame(rows)


def matching_scales(ranked: pd.DataFrame, target: str = "FC1") -> dict[str, float]:
    """c per LayerNorm so that its plasticity (mean over layers and tasks, from
    ``plasticity.ranking``) matches ``target``'s: ``ablations.matching_scale``."""
    p = ranked.groupby("component", observed=True)["plasticity"].mean()
    return {ln: float(matching_scale(p[ln], p[target])) for ln in NORMS}


def _scales_name(tasks, target: str, n_pairs: int) -> str:
    """The scales file of a study: ``scales-<hash of its settings>.json``."""
    settings = dict(tasks=list(tasks), target=target, n_pairs=n_pairs)
    return f"scales-{cached.config_hash(settings)}.json"


def measure_scales(root: str | Path, tasks, *, target: str = "FC1", n_pairs: int = 256) -> dict:
    """Measure the LayerNorm scales of the study stored under ``root``, once: the step that
    must come before its runs are listed (``part_runs`` only reads them: ``study_scales``).

    The embedded model's plasticity (hidden protocol, ``n_pairs`` per task) gives
    ``matching_scales``, rounded to 3 significant digits (the precision of the variant names),
    and everything is saved in ``root/scales-<hash of the settings>.json``. When that file is
    there it is read, not measured again: float noise of a re-measurement never changes a
    run, so its hash stays. Called by ``ConfoundStudy.load`` (recomputing) and
    the CLI's ``vitplast sweep`` of a confound study.

    Returns:
        ``tasks``, ``target``, ``n_pairs``, ``plasticity`` (mean per component) and
        ``scales`` (LayerNorm -> c).
    """
    def measure() -> dict:
        rates = empirical.measure_tasks(models.EMBEDDED_NAME, list(tasks), protocols=["hidden"],
                                        n_pairs=n_pairs)
        ranked = plasticity.ranking(rates)
        p = ranked.groupby("component", observed=True)["plasticity"].mean()
        return dict(tasks=list(tasks), target=target, n_pairs=n_pairs, plasticity=p.to_dict(),
                    scales={ln: float(f"{c:.3g}")
                            for ln, c in matching_scales(ranked, target).items()})

    return store.Store(root).companion(_scales_name(tasks, target, n_pairs), compute=measure)


def measure_study_scales(spec: Confound, root: str | Path) -> dict:
    """``measure_scales`` with the settings of a confound study's spec (``scale_tasks``,
    ``target``, ``n_pairs``): what must run before its runs are listed."""
    return measure_scales(root, spec.scale_tasks, target=spec.target,
                          n_pairs=spec.n_pairs)


def study_scales(root: str | Path, tasks, *, target: str = "FC1", n_pairs: int = 256) -> dict:
    """The LayerNorm scales of the study stored under ``root``, as ``measure_scales`` saved
    them (read only: nothing is measured here).

    Raises:
        FileNotFoundError: they are not measured yet, or were by other measuring code
            (``cached.companion``: a line says so), naming the file and the call that measures
            them.
        ValueError: the file is there but incomplete (``store.Store.companion``).
    """
    name = _scales_name(tasks, target, n_pairs)
    saved = store.Store(root).companion(name)
    if saved is None:
        raise FileNotFoundError(
            f"{Path(root) / name} is missing: the LayerNorm scales of this confound study are "
            f"not measured yet (by this measuring code). Measure them first: "
            f"vitplast.experiments.confounds.measure_scales("
            f"{str(root)!r}, {list(tasks)!r}, target={target!r}, n_pairs={n_pairs}) (`python "
            "-m vitplast sweep --study <confound study>` and ConfoundStudy.load(..., "
            "recompute=True) do it before listing the runs)")
    return saved


@torch.no_grad()
def check_rescale(model: nn.Module, x: torch.Tensor, y: torch.Tensor, scales: dict[str, float]
                  ) -> pd.DataFrame:
    """For each LayerNorm and its c: plasticity before and after the preserved rescale
    (hidden protocol, mean over layers), their ratio (should be c), and the largest output
    change of the preserved (should be ~0) and raw (should not) variants. x and y are moved
    to the model's device."""

    x, y = to_model(model, x, y)
    base = rates.batch_rates(model, x, y)
    out0 = model(x)
    rows = []
    for ln, c in scales.items():
        preserved = rescale_layernorm(copy.deepcopy(model), ln, c, preserve=True)
        raw = rescale_layernorm(copy.deepcopy(model), ln, c, preserve=False)
        after = rates.batch_rates(preserved, x, y)
        layers = [k for k in base if k[1] == ln]
        before_p = float(np.mean([base[k].mean().item() for k in layers]))
        after_p = float(np.mean([after[k].mean().item() for k in layers]))
        rows.append(dict(component=ln, c=c, plasticity_before=before_p, plasticity_after=after_p,
                         ratio=after_p / before_p,
                         max_output_change_preserved=(preserved(x) - out0).abs().max().item(),
                         max_output_change_raw=(raw(x) - out0).abs().max().item()))
    return pd.DataFrame(rows)


def complete_settings(df: pd.DataFrame, expected: list[dict]) -> pd.DataFrame:
    """The rows of ``with_variant`` results ``df`` whose (task, variant) setting has every run
    of ``expected`` stored (ok or diverged): an LR chosen on a ladder still filling would
    mislead. A study filling over sessions shows its findings setting by setting."""
    want = with_variant(pd.json_normalize(expected)).groupby(["task", "variant"]).size()
    done = df[df["status"].isin(["ok", "diverged"])].groupby(["task", "variant"]).size()
    full = [k for k, n in want.items() if done.get(k, 0) >= n]
    return df[pd.MultiIndex.from_frame(df[["task", "variant"]]).isin(full)] if len(df) else df


def variant_counts_table(model: nn.Module, scales: dict[str, float]) -> dict[str, int]:
    """Backbone entries each variant trains (``count`` of its ablation, else its trainable
    parameters but the head and final norm): what every matched finding states."""
    table = all_variants(model, scales)
    total = variant_counts(model, table).set_index("variant")["trainable"]
    head = variant_counts(model, {"head": Variant("head", "plain", "head")})["trainable"].iloc[0]
    return {name: int(total[name] - head) for name in table}
