"""The confound study's variants as values: what each one trains, as fields (``Variant``).

Paper: objections 3 and 4 (docs/objections.md). A variant is a named finetuning configuration
of the confound study, maybe with an ablation (``vitplast.train.ablations``). What it trains is held
in its fields (``family``, ``component``, ``c``, ``preserve``, ``count``, ``rank``, ``block``);
its name is a label for display, never parsed. ``variants``, ``layer_variants`` and
``all_variants`` make them; ``Variant.keywords`` gives the ``make_run`` keywords its runs are
made from (their hash covers them). A results table gets the same fields as columns from the
stored records (``with_variant``), and tables select variants by fields (``names_of``,
``name_of``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from torch import nn

from vitplast.measure.components import COMPONENTS, count_parameters
from vitplast.train.ablations import (
    BIAS_ONLY,
    LORA_COMPONENTS,
    LORA_PATTERNS,
    bias_count,
    lora_count,
)
from vitplast.train.configurations import PAPER_CONFIGS

#: What each family of variants changes (``Variant.family``).
VARIANT_FAMILIES = {
    "plain": "a configuration of configurations.CONFIGS as it is (component: the configuration)",
    "rescale": "a LayerNorm's gamma and beta times c; preserved: the next linear's weight / c",
    "lr/c^2": "a LayerNorm's learning rate divided by c^2: the preserved rescale's control",
    "sparse": "a component whose gradients are masked to count entries at random",
    "lora": "rank adapters on a component, masked to count entries",
    "bias": "only a component's biases, masked to count entries",
    "block": "one block's component alone"}
#: The fields of a ``Variant`` that say what it trains: ``catalogue``'s and ``with_variant``'s
#: columns.
FIELDS = ["family", "component", "c", "preserve", "count", "rank", "block"]
#: What a study part changes in the recipe -> (the changed value, the suffix its variants'
#: display names take).
SUFFIXES = {"optimizer": ("adamw", " (AdamW)"), "clip_grad_norm": (0.0, " (no clip)"),
            "checkpoint": ("init", " (init)")}
#: Relative tolerance within which two values of ``c`` are the same (a control's c is
#: recomputed from its learning-rate scale 1 / c^2).
C_RTOL = 1e-6


@dataclass(frozen=True)
class Variant:
    """One variant of the confound study: what it trains, as fields.

    Attributes:
        name: its label for display (stored in its runs' ``ablation["variant"]``).
        family: what it changes (``VARIANT_FAMILIES``).
        component: the component it trains (``components.COMPONENTS``); for a ``plain``
            variant, its configuration (``full``, ``head`` or a component).
        c: the LayerNorm scale (``rescale``, ``lr/c^2``).
        preserve: ``rescale``: the function preserved (the next linear divided by c) or not.
        count: the backbone entries it trains (``sparse``, ``lora``, ``bias``: masked to it).
        rank: the LoRA rank (``lora``).
        block: the one block it trains (``block``).
    """

    name: str
    family: str
    component: str
    c: float | None = None
    preserve: bool | None = None
    count: int | None = None
    rank: int | None = None
    block: int | None = None

    def __post_init__(self):
        if self.family not in VARIANT_FAMILIES:
            raise ValueError(f"variant {self.name!r}: unknown family {self.family!r}; "
                             f"valid: {list(VARIANT_FAMILIES)}")

    def keywords(self) -> dict:
        """The ``make_run`` keywords of its runs: ``config``, and where it has them
        ``prepare`` (a ``ablations.PREPARE`` name), ``ablation`` (its arguments, with the
        name as ``variant``) and ``lr_scales``. A new dict on every call."""
        if self.family == "plain":
            return dict(config=self.component)
        path = COMPONENTS[self.component]
        if self.family == "lr/c^2":
            return dict(config=self.component, lr_scales={f"blocks.*.{path}.*": 1 / self.c**2},
                        ablation=dict(variant=self.name))
        ablation = dict(variant=self.name, component=self.component)
        if self.family == "rescale":
            return dict(config=self.component, prepare="rescale_ln",
                        ablation=dict(ablation, c=self.c, preserve=self.preserve))
        if self.family == "sparse":
            return dict(config=self.component, prepare="sparse",
                        ablation=dict(ablation, count=self.count))
        if self.family == "lora":
            return dict(config=list(LORA_PATTERNS), prepare="lora",
                        ablation=dict(ablation, rank=self.rank, count=self.count))
        if self.family == "bias":
            return dict(config=list(BIAS_ONLY[self.component]), prepare="sparse",
                        ablation=dict(ablation, count=self.count))
        return dict(config=[f"blocks.{self.block}.{path}.*"], ablation=dict(ablation,
                                                                             block=self.block))


def variants(model: nn.Module, scales: dict[str, float], budget_from: str = "LN1",
             lora_rank: int = 1) -> dict[str, Variant]:
    """The confound experiments as variants, by name (counts from ``model``'s architecture).

    - ``<LN> x c (preserved)`` / ``<LN> x c (raw)``: LayerNorm rescaled by ``scales[LN]``.
    - ``<LN> lr/c^2 (c=...)``: the plain LayerNorm with its learning rate divided by c^2:
      under SGD without gradient clipping exactly what the preserved rescale does to it; with
      the recipe's global clip, close to it only as far as the LayerNorm's share of the global
      gradient norm is small (``vitplast.train.ablations``): the control.
    - ``<C> sparse``: MHA / FC1 / FC2 with exactly ``budget_from``'s trainable count.
    - ``<C> LoRA r<rank>``: rank-``lora_rank`` adapters on MHA / FC1 / FC2, masked down to the
      smallest of the three counts (MHA's adapters are larger), so all three train exactly as
      many backbone entries.
    - ``<C> bias``: only the biases of each component (BitFit-style), masked down to the
      smallest count among them (FC2's and the LayerNorms' betas: d per block), so every bias
      variant trains exactly as many backbone entries.

    The masked ones hold the ``count`` of backbone entries they train.
    """
    out = []
    for ln, c in scales.items():
        out += [Variant(f"{ln} x {c:.3g} ({'preserved' if preserve else 'raw'})", "rescale", ln,
                        c=c, preserve=preserve) for preserve in (True, False)]
        out.append(Variant(f"{ln} lr/c^2 (c={c:.3g})", "lr/c^2", ln, c=c))
    budget = count_parameters(model, budget_from)
    # the paper's components only: a row added to the component table changes no count here
    linears = [c for c in LORA_COMPONENTS if c in PAPER_CONFIGS]
    every = [c for c in COMPONENTS if c in PAPER_CONFIGS]
    lora = min(lora_count(model, comp, lora_rank) for comp in linears)
    bias = min(bias_count(model, comp) for comp in every)
    for comp in linears:
        out += [Variant(f"{comp} sparse", "sparse", comp, count=budget),
                Variant(f"{comp} LoRA r{lora_rank}", "lora", comp, rank=lora_rank, count=lora)]
    out += [Variant(f"{comp} bias", "bias", comp, count=bias) for comp in every]
    return {v.name: v for v in out}


def layer_variants(model: nn.Module, components=("LN1", "MHA", "FC1")) -> dict[str, Variant]:
    """One block's component at a time: ``<C> block <k>`` trains only block k's C (and the
    head): the trainable count is fixed within a component while its plasticity varies
    across layers (the per-layer test of notebook 05)."""
    return {f"{comp} block {k}": Variant(f"{comp} block {k}", "block", comp, block=k)
            for comp in components for k in range(len(model.blocks))}


def all_variants(model: nn.Module, scales: dict[str, float]) -> dict[str, Variant]:
    """Every variant a study part can train (the confound study's catalogue): the ablations
    of ``variants``, the single-block configurations of ``layer_variants`` and the plain
    configurations (``PAPER_CONFIGS``)."""
    return {**variants(model, scales), **layer_variants(model),
            **{c: Variant(c, "plain", c) for c in PAPER_CONFIGS}}


def catalogue(table: dict[str, Variant]) -> pd.DataFrame:
    """The variants of ``table`` as a table: one row per name, the ``FIELDS`` as columns."""
    rows = [{k: v for k, v in asdict(variant).items() if k != "name"}
            for variant in table.values()]
    return pd.DataFrame(rows, index=pd.Index(list(table), name="variant"), columns=FIELDS)


def with_variant(df: pd.DataFrame) -> pd.DataFrame:
    """Results (``results.records_table``, or runs through ``pd.json_normalize``) with the
    variant of each record as columns, from its stored fields, never from a name:

    - ``variant``: its display name: the ablation's name, else the configuration, with a
      suffix per recipe change of ``SUFFIXES`` (e.g. ``"MHA (AdamW)"``, ``"LN1 (init)"``);
    - ``family``, ``component``, ``preserve``, ``count``, ``rank``, ``block``: the
      ``Variant`` fields, from ``prepare``, ``ablation.*`` and ``config``;
    - ``c``: ``ablation.c``; for an lr/c^2 control (whose ``ablation`` holds only its name),
      from its ``lr_scales``: the component whose parameters the pattern scales and
      c = 1 / sqrt(scale).

    The recipe changes themselves are the table's ``optimizer``, ``clip_grad_norm`` and
    ``checkpoint`` columns.
    """
    name = df["config"].astype(str)
    if "ablation.variant" in df:
        name = df["ablation.variant"].fillna(name)
    for key, (value, suffix) in SUFFIXES.items():
        if key in df:
            name = name.where(df[key] != value, name + suffix)
    return df.assign(variant=name, **_fields(df))


def _fields(df: pd.DataFrame) -> dict[str, pd.Series]:
    """The ``FIELDS`` of each record of ``df`` (``with_variant``)."""
    def col(key: str) -> pd.Series:
        return df[key] if key in df else pd.Series(np.nan, index=df.index, dtype=object)

    config, prepare = df["config"].astype(str), col("prepare")
    component = col("ablation.component").astype(object)
    family = pd.Series("plain", index=df.index, dtype=object)
    family = family.mask(prepare.notna(), prepare)  # another ablation: its prepare's name
    family = family.mask(col("ablation.block").notna(), "block")
    # a sparse mask over the component's own configuration; bias only: over its bias patterns
    family = family.mask(prepare.eq("sparse"), config.eq(component).map({True: "sparse",
                                                                          False: "bias"}))
    family = family.mask(prepare.eq("lora"), "lora").mask(prepare.eq("rescale_ln"), "rescale")
    c = col("ablation.c").astype(float)
    for comp, path in COMPONENTS.items():
        scale = col(f"lr_scales.blocks.*.{path}.*").astype(float)
        scaled = scale.notna()
        family, component = family.mask(scaled, "lr/c^2"), component.mask(scaled, comp)
        c = c.mask(scaled, 1 / np.sqrt(scale))
    return dict(family=family, component=component.where(component.notna(), config), c=c,
                preserve=col("ablation.preserve"), count=col("ablation.count").astype("Int64"),
                rank=col("ablation.rank").astype("Int64"),
                block=col("ablation.block").astype("Int64"))


def variant_fields(df: pd.DataFrame, table: dict[str, Variant] | None = None) -> pd.DataFrame:
    """One row per variant name (sorted): its ``FIELDS`` and recipe changes (``SUFFIXES``'
    keys), from ``with_variant`` results ``df``; then the variants of the catalogue ``table``
    (``all_variants``) that have no run in ``df``, with the recipe unchanged. What
    ``names_of`` selects from."""
    keys = ["variant", *FIELDS, *[k for k in SUFFIXES if k in df]]
    out = df[keys].drop_duplicates("variant").set_index("variant") if len(df) else \
        pd.DataFrame(columns=keys).set_index("variant")
    if table:
        extra = catalogue(table)
        out = pd.concat([out, extra[~extra.index.isin(out.index)]]) if len(out) else extra
    return out.sort_index()


def names_of(fields: pd.DataFrame, **want) -> list[str]:
    """The names of the variants of ``fields`` (``variant_fields`` or ``catalogue``) whose
    fields are ``want``: a list or tuple means any of them; a float matches within a relative
    ``C_RTOL``. A recipe change of ``SUFFIXES`` not asked for (e.g. ``optimizer="adamw"``)
    leaves a variant out; one asked for matches nothing in a table without that column (a
    ``catalogue``). E.g. ``names_of(fields, family="sparse")``.

    Raises:
        ValueError: ``want`` names a field that is neither a column nor a recipe key.
    """
    keep = pd.Series(True, index=fields.index)
    for key, (changed, _) in SUFFIXES.items():
        if key not in want and key in fields:
            keep &= fields[key].ne(changed)
    for key, value in want.items():
        if key not in fields and key not in SUFFIXES:
            raise ValueError(f"{key!r} is not a column of the variants' fields; valid: "
                             f"{list(fields.columns)}")
        column = fields[key] if key in fields else pd.Series(np.nan, index=fields.index)
        if isinstance(value, (list, tuple)):
            keep &= column.isin(value)
        elif isinstance(value, float):
            keep &= pd.Series(np.isclose(column.astype(float), value, rtol=C_RTOL, atol=0),
                              index=fields.index)
        else:
            keep &= column.eq(value).fillna(False).astype(bool)
    return list(fields.index[keep])


def name_of(fields: pd.DataFrame, **want) -> str | None:
    """The one variant of ``fields`` whose fields are ``want`` (``names_of``); None when
    there is none, e.g. ``name_of(fields, family="sparse", component="MHA")``.

    Raises:
        ValueError: several variants match (naming them).
    """
    names = names_of(fields, **want)
    if len(names) > 1:
        raise ValueError(f"{want} matches several variants: {names}")
    return names[0] if names else None
