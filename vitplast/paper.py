"""The paper's reference values, each with the table, figure or section it comes from.

Paper: Odonnat et al., *Vision Transformer Finetuning Benefits from Non-Smooth Components*
(arXiv 2602.06883). One place for every number the kit compares with; the findings tables
(``vitplast.report``'s ``*_findings`` modules) put them in their ``paper`` column.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The configurations of the paper's main table, in its column order.
TABLE1_CONFIGS = ("MHA", "FC1", "FC2", "LN2", "LN1", "full", "linear probe")
#: Table 1: ViT-B/16 in21k, top-1 test accuracy in %, best LR per configuration, mean over
#: 3 seeds, per dataset (rows) and configuration (``TABLE1_CONFIGS``).
TABLE1 = {
    "CIFAR-10": (98.91, 99.09, 98.91, 98.72, 98.67, 99.02, 91.95),
    "CIFAR-100": (92.65, 92.85, 92.31, 91.93, 91.43, 92.74, 65.43),
    "contrast": (97.09, 97.06, 96.28, 96.67, 96.89, 97.23, 73.25),
    "gaussian noise": (89.41, 89.49, 88.49, 89.55, 88.99, 87.14, 49.20),
    "motion blur": (94.72, 94.53, 94.04, 93.95, 93.25, 94.67, 59.70),
    "snow": (95.47, 95.52, 95.27, 95.51, 95.15, 95.42, 59.25),
    "speckle noise": (90.07, 89.85, 89.22, 89.71, 89.74, 89.58, 51.15),
    "clipart": (77.31, 76.47, 76.54, 74.37, 74.65, 78.50, 42.76),
    "sketch": (69.23, 69.31, 69.49, 65.27, 65.76, 71.30, 29.08),
    "Flowers102": (99.03, 99.05, 98.86, 99.21, 98.99, 99.15, 96.34),
    "Pet": (94.37, 94.26, 93.98, 94.39, 94.46, 94.57, 88.33),
    "average": (90.75, 90.68, 90.31, 89.94, 89.82, 90.85, 64.22),
}
#: The paper's component order by finetuning accuracy (Table 1's average row, Takeaway 3).
FINETUNING_ORDER = ("MHA", "FC1", "FC2", "LN2", "LN1")
#: The paper's plasticity order on ViT-B (Fig. 2, Takeaway 2) and Fig. 2's per-layer means.
PLASTICITY_ORDER = ("MHA", "FC1", "FC2", "LN2", "LN1")
FIG2_PLASTICITY = {"MHA": 7.5, "FC1": 4.4, "FC2": 2.1, "LN2": 0.5, "LN1": 0.35}
#: The paper's finetuning grid (section 5; PAPER.md section 2): its SGD learning rates
#: (DomainNet has its own) and its seeds.
LRS = (1e-3, 3e-3, 1e-2, 3e-2)
LRS_DOMAINNET = (3e-3, 1e-2, 3e-2, 6e-2)
SEEDS = (0, 42, 3407)
#: Takeaway 1's order of the bounds, "~" as groups: MHA > FC1 ~ FC2 > LN2 ~ LN1.
TAKEAWAY1 = (("MHA",), ("FC1", "FC2"), ("LN2", "LN1"))
#: Component -> the proposition that bounds its plasticity (Props. 1-3; Prop. 4 is MHA's
#: tighter bound).
PROPOSITIONS = {"LN1": "Prop. 1", "LN2": "Prop. 1", "FC1": "Prop. 2", "FC2": "Prop. 2",
                "MHA": "Prop. 3"}
#: The RMS token norm the paper plugs into Prop. 3 for ViT-B (its MHA plug-in value):
#: sqrt(mean_i ||x_i||^2) of ViT-B's embedded CIFAR-10 test tokens (``SOURCES["token_norm"]``).
VITB_RMS_TOKEN_NORM = 19.4
#: Where each claim the kit tests is made.
SOURCES = {
    "table1": "Table 1 (ViT-B/16, mean of 3 seeds)",
    "lr_stability": "Fig. 18 and Takeaway 3 (more LR-stable)",
    "plasticity_gain": "Takeaway 3 (high plasticity -> better finetuning)",
    "grad_norms": "Fig. 4 and Takeaway 3 (larger gradient norms)",
    "adamw": "the AdamW ablation (LR = SGD LR / 100): the component order is claimed to hold",
    "fig2": "Fig. 2 (ViT-B, per-layer means read off the figure)",
    "token_norm": "the theory part's plug-in values for Prop. 3 on ViT-B (n = 197, H = 12, "
                  "r = 19.4: the RMS norm of its embedded CIFAR-10 test tokens)",
}




@dataclass(frozen=True)
class Claim:
    """A claim the paper makes, as a findings row cites it (``primaries.Primary.cites``).

    Args:
        source: where the paper makes it (table, figure or section).
        says: the claim in words.
        direction: its sign for a row measuring "a minus b" or a correlation: +1, -1, or 0
            where the paper reports about no difference.
    """

    source: str
    says: str
    direction: int


#: The claims of the paper that the kit's declared primaries test, by key. A row that cites
#: one reads "agrees with the paper" / "disagrees with the paper" / "not resolved"; a row that
#: cites none reads "resolved: positive" / "resolved: negative" / "not resolved"
#: (``verdicts``). Their values in a row's unit: ``group_gap``, ``plasticity_gain_spearman``.
CLAIMS = {
    "linears over LayerNorms": Claim(
        "Table 1 average (ViT-B/16) and Takeaway 3",
        "finetuning MHA, FC1 or FC2 alone gives higher test accuracy than LN1 or LN2 alone", +1),
    "MHA over LN1": Claim(
        "Table 1 average (ViT-B/16)",
        "finetuning MHA alone gives higher test accuracy than LN1 alone", +1),
    "plasticity goes with gain": Claim(
        "Takeaway 3 with Fig. 2 and Table 1 (ViT-B/16)",
        "components with higher plasticity gain more from finetuning", +1),
}


def claim(key: str) -> Claim:
    """The paper's claim named ``key`` (of ``CLAIMS``).

    Raises:
        ValueError: an unknown key, naming the valid ones.
    """
    if key not in CLAIMS:
        raise ValueError(f"unknown claim of the paper {key!r}; valid: {sorted(CLAIMS)}")
    return CLAIMS[key]


def table1_average(config: str) -> float:
    """Table 1's average accuracy (%) of one configuration."""
    return TABLE1["average"][TABLE1_CONFIGS.index(config)]


def group_gap(a, b) -> float:
    """Table 1's average accuracy (%) of the configurations ``a``, averaged, minus that of
    ``b``: the paper's value for a difference of configuration groups (``primaries.Primary``)."""
    return (sum(table1_average(c) for c in a) / len(a)
            - sum(table1_average(c) for c in b) / len(b))


def plasticity_gain_spearman() -> float:
    """Spearman's rho, over the five components, between the paper's plasticity (Fig. 2) and
    its Table 1 average accuracy: the paper's value for "plasticity goes with gain"."""
    from scipy import stats

    return float(stats.spearmanr([FIG2_PLASTICITY[c] for c in FINETUNING_ORDER],
                                 [table1_average(c) for c in FINETUNING_ORDER]).statistic)
