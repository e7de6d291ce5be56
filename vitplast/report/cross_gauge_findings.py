"""The cross-gauge study's findings (notebook 07): what the gauge provably leaves alone, and
what its shared-LR recipe measures, as findings rows.

Paper: none (issue 28; it bears on Takeaway 3). The study (``studies.get("gauge")``) finetunes
the same network at c = 1 and under the residual-stream gauge c = 8 (``vitplast.measure.gauge``);
its run pairs and identity reruns are read and computed by ``vitplast.experiments.cross_gauge``.

- ``gauge_checks``: of the runs the gauge provably leaves alone (head-only, LN1), paired by run
  hash: their first losses must agree, and their loss histories as far as training does not
  amplify rounding (the LR up to which they do is computed); at the chosen LRs their test
  difference is what rounding alone does to one run; and pairs whose loss histories agree can
  still end apart in test accuracy (``agreeing_losses``).
- ``identity_findings``: the configurations it changes (MHA, FC2) at c = 8 follow c = 1 with the
  gauged parameters' LR divided by c^2 (without clipping), on the study's own tasks and chosen
  LRs: the per-parameter LRs that one shared LR at c = 1 cannot reach, so its primaries measure
  a shared-LR recipe under a reparametrization, not a causal effect of plasticity.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from vitplast.experiments.cross_gauge import GAUGE_INVARIANT
from vitplast.report.suite_findings import accuracy, rising_loss
from vitplast.stats import verdicts


def _trajectory_row(pairs: pd.DataFrame) -> dict:
    """Do the pairs follow one loss history? Per LR, the largest difference of the two
    histories: the largest LR up to which every pair stays within ``SAME_TRAJECTORY``, and how
    far the pairs above it part."""
    worst = pairs.groupby("lr")["max_loss_diff"].max()
    same = worst <= verdicts.SAME_TRAJECTORY
    leading = worst.index[same.astype(int).cummin().astype(bool)]  # LRs before the first miss
    upto = leading.max() if len(leading) else np.nan
    above = pairs[pairs["lr"] > upto] if np.isfinite(upto) else pairs
    devices = " and ".join(sorted({d for ds in pairs["devices"] for d in ds.split(", ")}))
    if not np.isfinite(upto):
        verdict = "not the same at any LR stored: the derivation or the code is wrong"
    elif not len(above):
        verdict = f"the same trajectory at every LR stored (up to {upto:g}), as derived"
    else:
        verdict = (f"the same trajectory up to LR {upto:g}, as derived; above it the pairs part "
                   f"by up to {above['max_loss_diff'].max():.2g} from first-step differences "
                   f"of at most {above['first_diff'].max():.1g}: large steps amplify rounding "
                   f"(the pairs ran on {devices})")
    return verdicts.descriptive(
        f"do {' and '.join(GAUGE_INVARIANT)} follow the same loss history at c = 8 as at c = 1 "
        "(derived: the gauge scales nothing they train)?",
        measured=", ".join(f"{d:.1g} (LR {lr:g})" for lr, d in worst.items()),
        paper="not in the paper (vitplast.measure.gauge, derived and tested)", verdict=verdict,
        n=len(pairs), unit="largest loss difference per LR, over run pairs")


def gauge_checks(pairs: pd.DataFrame, picked: pd.DataFrame, test_size=None) -> list[dict]:
    """The cross-gauge study's checks as findings rows, from its pairs
    (``cross_gauge.gauge_pairs``): the invariant configurations compute the same first loss at
    c = 8 as at c = 1 (the gauge keeps the function; descriptive, at
    ``verdicts.SAME_TRAJECTORY``) and follow the same loss history (up to which LR:
    ``_trajectory_row``), and how far apart in test accuracy pairs whose histories agree can end
    (``agreeing_losses``); the share of chosen runs whose loss rose above its start
    (``search.state``'s ``loss_rose``); and, per invariant configuration, c = 8 minus c = 1 at
    the LRs the search chose (``picked``: the study's ``load``), a test of what
    rounding alone does to the study's single runs (exploratory: zero in exact arithmetic).
    ``test_size``: task -> its number of test images (``agreeing_losses``), or None."""
    if not len(pairs):
        rows = [verdicts.descriptive(
            f"{' and '.join(GAUGE_INVARIANT)} at c = 8 as at c = 1", measured=np.nan,
            paper="not in the paper", verdict="no pair stored yet", n=0, unit="run pairs")]
    else:
        first = float(pairs["first_diff"].max())
        rows = [verdicts.descriptive(
            f"do {' and '.join(GAUGE_INVARIANT)} compute the same first loss at c = 8 as at "
            "c = 1 (derived: the gauge keeps the network's function)?", measured=first,
            paper="not in the paper (vitplast.measure.gauge, derived and tested)",
            verdict=("the same, as derived" if first <= verdicts.SAME_TRAJECTORY else
                     "not the same: the derivation or the code is wrong"),
            n=len(pairs), unit="largest first-loss difference, over run pairs"),
            _trajectory_row(pairs)]
    if len(pairs):
        rows.append(agreeing_losses(pairs, test_size))
    rows.append(rising_loss(picked))
    acc = accuracy(picked)
    for config in GAUGE_INVARIANT:
        if {config, f"{config} c=8"} <= set(acc):
            rows.append(verdicts.paired_test(
                f"{config} at c = 8 - at c = 1, each at its chosen LR (zero in exact arithmetic: "
                "what rounding alone does to one run)", acc[f"{config} c=8"], acc[config],
                paper="not in the paper", expected=math.nan, unit="points, per task (seed 0)",
                sides=(f"{config} at c = 8", f"{config} at c = 1")))
    return rows


def agreeing_losses(pairs: pd.DataFrame, test_size=None) -> dict:
    """A descriptive row: of the pairs (``cross_gauge.gauge_pairs``) whose loss histories agree
    within ``verdicts.SAME_TRAJECTORY``, the largest test-accuracy difference, and which pair: the
    same training loss does not make the same test accuracy (a few steps apart in rounding
    can move a decision boundary over test images). ``test_size`` (task -> its number of test
    images) turns the points into images."""
    agree = pairs[pairs["max_loss_diff"] <= verdicts.SAME_TRAJECTORY]
    if not len(agree):
        return verdicts.descriptive(
            "pairs whose loss histories agree: largest test difference", measured=np.nan,
            paper="not in the paper", verdict="no pair's loss histories agree", n=0,
            unit="run pairs")
    top = agree.loc[agree["test_diff"].abs().idxmax()]
    return verdicts.descriptive(
        f"pairs whose loss histories agree within {verdicts.SAME_TRAJECTORY:g}: largest "
        "test-accuracy difference (c = 8 minus c = 1)", measured=float(top["test_diff"]),
        paper="not in the paper", n=len(agree), unit="test points, over agreeing run pairs",
        verdict=f"{top['task']} / {top['config']} / LR {top['lr']:g}: loss histories "
                f"{top['max_loss_diff']:.2g} apart, test accuracies {abs(top['test_diff']):.2f} "
                "points apart" + _images(abs(top["test_diff"]), top["task"], test_size)
                + ": the same loss does not make the same test accuracy")


def _images(points: float, task: str, test_size) -> str:
    """A test-accuracy difference in test images, where the task's test size is known."""
    if test_size is None:
        return ""
    n = int(test_size(task))
    return f" (about {round(points * n / 100)} of its {n} test images)"


def _parted(ident: pd.DataFrame) -> str:
    """The verdict of an identity whose runs part: which pairs, and at which LRs."""
    off = ident[ident["noclip"] > verdicts.SAME_TRAJECTORY]
    where = ", ".join(f"{r.config} on {r.task} at LR {r.lr:g} ({r.noclip:.2g})"
                      for r in off.itertuples())
    return (f"not the same within {verdicts.SAME_TRAJECTORY:g} for {where}: the gauge is exact "
            "only up to LayerNorm's eps / c^2, and large steps amplify that and rounding (as in "
            "the invariant pairs at large LRs); the others agree")


def identity_findings(ident: pd.DataFrame) -> list[dict]:
    """Descriptive rows on ``cross_gauge.identity``: the c = 8 runs follow c = 1 at the derived
    per-parameter LRs without clipping (within ``verdicts.SAME_TRAJECTORY``), what the recipe's
    clip does to that, and the per-parameter LRs no shared LR at c = 1 reaches."""
    n, where = len(ident), "the study's tasks and chosen LRs"
    unit = "largest |loss difference|, over run pairs"
    what = " and ".join(f"{c}-only" for c in ident["config"].unique())
    noclip, clip = float(ident["noclip"].max()), float(ident["clip"].max())
    same = noclip <= verdicts.SAME_TRAJECTORY
    ratio = float((ident["lr"] / ident["derived_lr"]).median())
    reach = "; ".join(f"{r.config} on {r.task}: {r.gauged} at {r.derived_lr:.2g}, the rest at "
                      f"{r.lr:.2g}" for r in ident.itertuples())
    derived = "not in the paper (vitplast.measure.gauge, derived and tested)"
    return [
        verdicts.descriptive(
            f"do {what} at c = 8 with one shared LR follow c = 1 with the gauged parameters' "
            f"LR divided by c^2, no clipping ({where})?", noclip,
            paper=derived, n=n, unit=unit,
            verdict=(f"the same trajectory (within {verdicts.SAME_TRAJECTORY:g}), as derived"
                     if same else _parted(ident))),
        verdicts.descriptive(
            f"and with the recipe's gradient clip in both runs ({where})?", clip,
            paper=derived, n=n, unit=unit,
            verdict=("the same: the clip did not act" if clip <= verdicts.SAME_TRAJECTORY else
                     "not the same: the clip acts on the two runs differently")),
        verdicts.descriptive(
            "the per-parameter LRs at c = 1 that a c = 8 run with one shared LR is", reach,
            paper=derived, n=n, unit="(per run pair)",
            verdict=(f"the gauged parameters train at 1/{ratio:.0f} of the rest's LR, which no "
                     "single LR shared by every parameter at c = 1 reaches: the cross-gauge "
                     "primaries compare a shared-LR recipe under a reparametrization, not "
                     "plasticity"))]


__all__ = ["agreeing_losses", "gauge_checks", "identity_findings"]
