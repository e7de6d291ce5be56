"""Notebook 02c's findings: the paper's measurements on a real pretrained ViT (DINOv2 ViT-S/14,
``vitplast.measure.real``) as rows, the orders beside the paper's and the embedded model's, and
the real-model study's declared primaries.

One model is measured, on two pair sources: the ranking rows describe that model (n counts its
blocks, which are not independent units), so they carry no test and read "same as" / "differs
from" the paper (``verdicts.same``), never a test's "agrees"; only the study's rows, one value
per task, are tested (Holm over the three primaries, and within each other family).

Paper: Fig. 2 and Takeaway 2 (``paper.FIG2_PLASTICITY``, ``paper.PLASTICITY_ORDER``), Takeaway 1
(the order of the bounds), the token scale of ViT-B (``paper.VITB_RMS_TOKEN_NORM``), Takeaway 3
and Table 1 (the study's primaries).
"""

from __future__ import annotations

import pandas as pd
from scipy import stats

from vitplast import paper
from vitplast.experiments import studies
from vitplast.measure import real
from vitplast.measure.pairs import PROTOCOLS
from vitplast.report.plasticity_findings import token_ratio_words
from vitplast.stats import verdicts
from vitplast.stats.verdicts import descriptive, paired_test

FIG2 = paper.SOURCES["fig2"]
_ORDER = list(paper.PLASTICITY_ORDER)


def order(means: pd.Series) -> str:
    """Components from the largest value to the smallest, as text ("MHA > FC1 > ...")."""
    return " > ".join(means.sort_values(ascending=False).index)


def fig2_rho(means: pd.Series) -> float:
    """Spearman's rho of ``means`` (one value per component) with the paper's Fig. 2 values."""
    return _rank_stat(stats.spearmanr, [means[c] for c in _ORDER],
                      [paper.FIG2_PLASTICITY[c] for c in _ORDER])


def _rank_stat(test, a, b) -> float:
    """A rank correlation, rounded off at 1e-12 (rho = 1 for the same order, not 0.9999...)."""
    return round(float(test(a, b).statistic), 12)


def orders_beside(models: dict[str, pd.DataFrame], value: str = "plasticity") -> pd.DataFrame:
    """The order of the five components by the mean over blocks of ``value``, per model, source
    and protocol, beside the paper's: ``models`` maps a model's label to its per-block table
    (``layer``, ``component``, ``protocol``, ``value``; a ``source`` column where it has one).
    Columns: ``model``, ``source``, ``protocol``, ``order``, ``rho_fig2`` (Spearman with Fig. 2),
    and the five means."""
    rows = [dict(model="ViT-B (paper)", source="ImageNet val x downstream", protocol="embedding",
                 order=" > ".join(_ORDER), rho_fig2=1.0, **paper.FIG2_PLASTICITY)]
    for label, table in models.items():
        t = table if "source" in table else table.assign(source="")
        for (source, protocol), g in t.groupby(["source", "protocol"], sort=False):
            means = g.groupby("component")[value].mean()
            rows.append(dict(model=label, source=source, protocol=protocol, order=order(means),
                             rho_fig2=fig2_rho(means), **means[_ORDER].to_dict()))
    return pd.DataFrame(rows)


def _ranking_row(layers: pd.DataFrame, source: str, protocol: str) -> dict:
    g = layers[(layers["source"] == source) & (layers["protocol"] == protocol)]
    means = g.groupby("component")["plasticity"].mean()
    rho = fig2_rho(means)
    same = order(means) == " > ".join(_ORDER)
    return descriptive(
        f"order of the five components by plasticity, mean over the {g['layer'].nunique()} "
        f"blocks [{source}, {protocol}]", rho, paper=f"+1 ({' > '.join(_ORDER)}), {FIG2}",
        n=g["layer"].nunique(), unit="Spearman rho with Fig. 2 over the 5 components",
        verdict=f"{verdicts.same(same)}: {order(means)}")


def _threshold_row(layers: pd.DataFrame, source: str, protocol: str) -> dict:
    g = layers[(layers["source"] == source) & (layers["protocol"] == protocol)]
    means = g.groupby("component")["plasticity"].mean()
    side = {c: (means[c] > 1) == (paper.FIG2_PLASTICITY[c] > 1) for c in _ORDER}
    off = [f"{c} {means[c]:.2g}" for c in _ORDER if not side[c]]
    return descriptive(
        f"components on the paper's side of 1 (MHA, FC1, FC2 above; LN2, LN1 below) "
        f"[{source}, {protocol}]", sum(side.values()),
        paper="5 of 5, Takeaway 2 (non-smooth: plasticity above 1)", n=5,
        unit="components of 5", verdict=verdicts.same(all(side.values())) + (
            "" if all(side.values()) else ": " + ", ".join(off) + " on the other side"))


def measurement_rows(layers: pd.DataFrame, stream: pd.DataFrame,
                     source: str = "photos") -> list[dict]:
    """The real model's findings rows, twelve, the five main ones first (notebook 02c's appendix
    reads the rest): 0-1 the order against Fig. 2 on ``source``'s pairs under both protocols;
    2 Takeaway 2's threshold; 3 the bounds against the observed rates; 4 the token scale
    against ViT-B's; then 5 the order on the other source's pairs (embedding protocol); 6
    Takeaway 1's order of the bounds against the measured order; 7 relative plasticity's order
    against the absolute one; 8-9 the other source's order and the threshold under ``hidden``;
    10-11 rows 6 and 7 under ``embedding`` (every plasticity row under both protocols; relative
    plasticity is gauge-invariant under ``hidden`` only). ``layers``, ``stream``:
    ``vitplast.measure.real`` tables."""
    other = next(s for s in layers["source"].unique() if s != source)
    rows = [_ranking_row(layers, source, "embedding"), _ranking_row(layers, source, "hidden"),
            _threshold_row(layers, source, "embedding")]
    holds = layers["bound_holds"].astype("boolean")
    rows.append(descriptive(
        "Props. 1-3 above the observed lower end of Lip(f) (largest rate, local Lipschitz "
        "estimate), every block, component, protocol and source", int(holds.sum()),
        paper="always (they are upper bounds), Props. 1-3", n=int(holds.notna().sum()),
        unit="(block, component, protocol, source) cells",
        verdict=f"{'holds' if holds.all() else 'FAILS'} in {int(holds.sum())} of "
        f"{int(holds.notna().sum())}"))
    r = float(stream.loc[stream["source"] == source, "r_embedding"].mean())
    sigma = float(stream.loc[stream["source"] == source, "sigma_ln1"].mean())
    rows.append(descriptive(
        f"token scale r (RMS token norm of the embedding) [{source}]", r,
        paper=f"{paper.VITB_RMS_TOKEN_NORM} on ViT-B, {paper.SOURCES['token_norm']}", n=1,
        unit="RMS token norm", verdict=f"{token_ratio_words(paper.VITB_RMS_TOKEN_NORM / r)}; "
        f"the stream LN1 reads has a mean per-token sigma of {sigma:.2g} (Prop. 1: a "
        "LayerNorm's rate is up to max|gamma| / sigma)"))
    return rows + [_ranking_row(layers, other, "embedding"), _bounds_row(layers, source, "hidden"),
                   _relative_row(layers, source, "hidden"), _ranking_row(layers, other, "hidden"),
                   _threshold_row(layers, source, "hidden"),
                   _bounds_row(layers, source, "embedding"),
                   _relative_row(layers, source, "embedding")]


def _bounds_row(layers: pd.DataFrame, source: str, protocol: str) -> dict:
    """Takeaway 1's order of the bounds against the measured order of plasticity."""
    g = layers[(layers["source"] == source) & (layers["protocol"] == protocol)]
    bound_means = g.groupby("component")["lipschitz_upper"].mean()
    plast = g.groupby("component")["plasticity"].mean()
    tau = _rank_stat(stats.kendalltau, bound_means[_ORDER], plast[_ORDER])
    return descriptive(
        f"order of the bounds (Props. 1-4, the tighter of 3 and 4 for MHA) against the order "
        f"of plasticity [{source}, {protocol}]", tau, paper="Takeaway 1 ranks the bounds "
        "MHA > FC1 ~ FC2 > LN2 ~ LN1 and reads it as plasticity's order", n=5,
        unit="Kendall tau over the 5 components",
        verdict=f"bounds: {order(bound_means)}; plasticity: {order(plast)}")


def _relative_row(layers: pd.DataFrame, source: str, protocol: str) -> dict:
    """Relative plasticity's order against the absolute one."""
    g = layers[(layers["source"] == source) & (layers["protocol"] == protocol)]
    rel = g.groupby("component")["relative_plasticity"].mean()
    plast = g.groupby("component")["plasticity"].mean()
    rho = _rank_stat(stats.spearmanr, rel[_ORDER], plast[_ORDER])
    invariant = "gauge-invariant" if protocol == "hidden" else "not gauge-invariant under it"
    return descriptive(
        f"order by relative plasticity ({invariant}) against the absolute order "
        f"[{source}, {protocol}]", rho, paper="not in the paper (it measures absolute plasticity)",
        n=5, unit="Spearman rho over the 5 components",
        verdict=f"relative: {order(rel)}; absolute: {order(plast)}")


def task_statistics(acc: pd.DataFrame, task_plasticity: pd.DataFrame,
                    protocol: str = "embedding") -> dict[str, pd.Series]:
    """The per-task statistics the real-model study's primaries read: Spearman's rho over the
    five components between the gain over head-only (test accuracy, ``acc``: tasks x
    configurations) and plasticity, absolute and relative (``task_plasticity``:
    ``vitplast.measure.real.task_plasticity``, mean over blocks, under ``protocol``)."""
    out = {}
    for name, column in (("spearman(plasticity, gain)", "plasticity"),
                         ("spearman(relative plasticity, gain)", "relative_plasticity")):
        p = task_plasticity[task_plasticity["protocol"] == protocol].pivot(
            index="task", columns="component", values=column)
        rho = {}
        for task in acc.index.intersection(p.index):
            if all(c in acc.columns for c in (*_ORDER, "head")):
                gain = acc.loc[task, _ORDER] - acc.loc[task, "head"]
                rho[task] = _rank_stat(stats.spearmanr, p.loc[task, _ORDER], gain)
        out[name] = pd.Series(rho, dtype=float)
    return out


def study_rows(primaries, acc: pd.DataFrame, task_plasticity: pd.DataFrame,
               protocol: str = "embedding") -> list[dict]:
    """The real-model study's primaries as rows (family "primary"): ``primaries`` from its spec
    (``study_specs.REAL_PRIMARIES``), ``acc`` its test accuracy (tasks x configurations, in %),
    ``task_plasticity`` as ``task_statistics`` reads it, under ``protocol`` (the declared one);
    then each plasticity primary under the other protocol (family "sensitivity", Holm within
    it); then, exploratory, the measured most - least plastic component (by plasticity, mean
    over tasks and blocks: one row per distinct pair the two protocols name, the claim naming
    its protocols), tested against Takeaway 3 (the more plastic, the better finetuned)."""
    protocols = [protocol, *(p for p in PROTOCOLS if p != protocol)]
    statistics = task_statistics(acc, task_plasticity, protocol)
    rows = [dict(p.row(acc, statistics), **({"claim": p.under(protocol)}
                                            if p.statistic in statistics else {}))
            for p in primaries]  # each plasticity row names its protocol
    for other in protocols[1:]:
        again = task_statistics(acc, task_plasticity, other)
        rows += [dict(p.row(acc, again), family="sensitivity", claim=p.under(other, protocol))
                 for p in primaries if p.statistic in again]
    pairs: dict[tuple[str, str], list[str]] = {}
    for pr in protocols:
        ranked = (task_plasticity[task_plasticity["protocol"] == pr]
                  .groupby("component")["plasticity"].mean().reindex(_ORDER).dropna()
                  .sort_values())
        if len(ranked) > 1:
            pairs.setdefault((ranked.index[-1], ranked.index[0]), []).append(pr)
    for (most, least), named in pairs.items():
        if most in acc and least in acc:
            rows.append(paired_test(
                f"{most} - {least} (the real model's most - least plastic, measured: "
                f"{' and '.join(named)} protocol{'s' if len(named) > 1 else ''}), test accuracy",
                acc[most], acc[least], paper=paper.SOURCES["plasticity_gain"], expected=1,
                unit="points, per task (seed 0)", sides=(most, least)))
    return rows


def shipped(root=None) -> pd.DataFrame:
    """The real model's findings table from its store (``root``, default the ``real`` study's):
    the measurement rows (``vitplast.measure.real``'s tables) and, over the study's complete
    tasks, ``study_rows`` (its primaries, their sensitivity rows and the exploratory contrast;
    none while no task is complete). What notebook 07's closing synthesis
    reads of real weights."""
    study = studies.get("real")
    root = root or study.root()
    tables = real.read(root)
    runs = study.load(root).runs
    rows = measurement_rows(tables["layers"], tables["stream"])
    if len(runs):
        acc = runs.pivot(index="task", columns="config", values="test_acc")
        rows = study_rows(study.spec.primaries, acc, tables["tasks"]) + rows
    return verdicts.table(rows)
