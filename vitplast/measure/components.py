"""Components: the five parts of a pre-norm ViT block, as values (``TABLE``) over a timm model.

Paper: section 3, the components LN1, MHA, LN2, FC1, FC2 of every block.

=========  ======================  =============================================
component  timm module (block i)   what it computes
=========  ======================  =============================================
LN1        ``blocks.i.norm1``      LayerNorm before attention
MHA        ``blocks.i.attn``       multi-head self-attention incl. output projection
LN2        ``blocks.i.norm2``      LayerNorm before the MLP
FC1        ``blocks.i.mlp.fc1``    first MLP linear (d -> 4d)
FC2        ``blocks.i.mlp.fc2``    second MLP linear (4d -> d)
=========  ======================  =============================================

A component's output is its module's own output: before LayerScale (``ls1``/``ls2`` in
DINOv2-style models), dropout and the residual connection.

Everything the kit knows of a component is one ``Component`` value, a row of ``TABLE``: its
name and group, where its input and output are read in a block (``Tap``: so a unit that is no
single module, such as the attention branch x -> x + MHA(LN1(x)), is measured as well), the
factor its rate takes under the residual-stream gauge, the parameters it trains, the
proposition that bounds it and its colour in the figures. The measuring functions take a
table (``components=``, ``TABLE`` by default); ``extended`` adds rows to a table, as a new
value. ``COMPONENTS``, ``LINEARS`` and ``NORMS`` are views of ``TABLE`` (``modules``,
``group``); every other module derives what it needs from the rows, so a row added here is
measured, stamped (``fingerprint``: every measuring cache, so that no table measured without
the row is served), drawn, finetuned (``vitplast.train.configurations``) and validated (the
stored files' component names are checked against ``names``) with no other file changed.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a model is used, so that the names and groups
    from torch import nn  # above import without it (the findings, ``results``)

#: The protocols a gauge factor is given for (``vitplast.measure.pairs.PROTOCOLS``).
_PROTOCOLS = ("hidden", "embedding")
#: A component's group: the paper's gap is between the linears and the LayerNorms (Table 1,
#: Takeaway 3); a ``branch`` is a unit made of several modules.
GROUPS = ("linear", "norm", "branch")
#: The rate's factor under the gauge (``vitplast.measure.gauge``) for a power k of c: written
#: out, so that the numbers are those of ``1 / c`` and ``c`` exactly.
_FACTORS = {-1: lambda c: 1 / c, 0: lambda c: 1.0, 1: lambda c: c}


@dataclass(frozen=True)
class Tap:
    """Where a tensor is read in a block: what goes into (``side="input"``) or comes out of
    (``"output"``) the module at ``path`` inside the block (e.g. ``"mlp.fc1"``)."""

    path: str
    side: str


@dataclass(frozen=True)
class Component:
    """One measured unit of a block, with all the kit knows of it.

    Attributes:
        name: its name in tables, figures and schemas (``"MHA"``).
        group: one of ``GROUPS``.
        taps: where its input and its output are read, ``(Tap, Tap)``; its rate is
            ||out(x) - out(y)|| / ||in(x) - in(y)||.
        module: the path of the module it is, inside a block (its input and output are that
            module's), or None for a unit that is no single module.
        gauge: ``((protocol, k), ...)``: under the gauge its rate is times c^k (k in -1, 0, 1),
            k None where no factor is derived.
        patterns: fnmatch patterns of the parameters it trains (its finetuning configuration,
            ``vitplast.train.configurations.configs``).
        bound: the name of the function of ``vitplast.measure.bounds`` that bounds it (Props.
            1-3), or None where no proposition gives one.
        colour: its colour in every figure (``vitplast.report.plot_style.PALETTE``).
    """

    name: str
    group: str
    taps: tuple[Tap, Tap]
    module: str | None
    gauge: tuple[tuple[str, int | None], ...]
    patterns: tuple[str, ...]
    bound: str | None
    colour: str

    def factor(self, protocol: str):
        """Its rate's factor under the gauge as a function of c, or None (not derived)."""
        k = dict(self.gauge)[protocol]
        return None if k is None else _FACTORS[k]


def module_component(name: str, group: str, path: str, *, hidden: int | None,
                     embedding: int | None, bound: str | None, colour: str) -> Component:
    """A component that is one module of a block (``path``): its input and output are the
    module's, and it trains the module's parameters."""
    return Component(name, group, (Tap(path, "input"), Tap(path, "output")), path,
                     (("hidden", hidden), ("embedding", embedding)), (f"blocks.*.{path}.*",),
                     bound, colour)


#: The five components of the paper, in block order. Colours: two colour-blind-safe
#: schemes (why: ``vitplast.report.plot_style.PALETTE``). Gauge factors
#: derived in ``vitplast.measure.gauge``.
TABLE: tuple[Component, ...] = (
    module_component("LN1", "norm", "norm1", hidden=-1, embedding=-1,
                     bound="layernorm_bound", colour="#882255"),  # wine
    module_component("MHA", "linear", "attn", hidden=1, embedding=None,
                     bound="mha_bound", colour="#0072B2"),  # blue
    module_component("LN2", "norm", "norm2", hidden=-1, embedding=-1,
                     bound="layernorm_bound", colour="#CC3311"),  # red
    module_component("FC1", "linear", "mlp.fc1", hidden=0, embedding=0,
                     bound="linear_bound", colour="#CCBB44"),  # yellow
    module_component("FC2", "linear", "mlp.fc2", hidden=1, embedding=1,
                     bound="linear_bound", colour="#66CCEE"),  # cyan
)


def _checked_table(table) -> tuple[Component, ...]:
    """``table`` as a tuple, or ``ValueError`` naming what is wrong with a row."""
    table = tuple(table)
    names = [c.name for c in table]
    for c in table:
        if not isinstance(c, Component):
            raise ValueError(f"a component table holds Component values, got {c!r}")
        if (c.group not in GROUPS or len(c.taps) != 2
                or any(t.side not in ("input", "output") for t in c.taps)
                or sorted(dict(c.gauge)) != sorted(_PROTOCOLS)
                or any(k not in _FACTORS for k in dict(c.gauge).values() if k is not None)):
            raise ValueError(f"component {c.name!r}: group one of {GROUPS}, two taps (input "
                             "and output, each on an 'input' or 'output' side), gauge powers "
                             f"in -1, 0, 1 or None for {_PROTOCOLS}; got {c}")
        if names.count(c.name) > 1:
            raise ValueError(f"component {c.name!r} is in the table twice: {names}")
    return table


def extended(*rows: Component, table=TABLE) -> tuple[Component, ...]:
    """A new table: ``table``'s rows, then ``rows`` (``table`` itself is unchanged). Pass it as
    ``components=`` to the measuring functions, e.g. ``plasticity.measure(..., components=
    extended(row))``: their stored tables are stamped with its fingerprint and checked
    against its ``names`` (``fingerprint.stamp``, ``vitplast.schema.check``)."""
    return _checked_table(tuple(table) + rows)


def by_name(table=TABLE) -> dict[str, Component]:
    """Name -> Component of a table, in its order."""
    return {c.name: c for c in _checked_table(table)}


def names(table=TABLE) -> tuple[str, ...]:
    """The names of a table's components, in its order."""
    return tuple(c.name for c in table)


def fingerprint(table=TABLE) -> str:
    """A short stable hash of what a table says of its components (names, groups, taps,
    modules, gauge factors, patterns, bound functions): a cached result measured with one
    table is not read for another."""
    rows = [[c.name, c.group, [[t.path, t.side] for t in c.taps], c.module,
             [list(g) for g in c.gauge], list(c.patterns),
             None if c.bound is None else f"vitplast.measure.bounds.{c.bound}"] for c in table]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:12]


def rate_factors(table=TABLE) -> dict[str, dict]:
    """Protocol -> component -> its rate's factor under the gauge as a function of c (None:
    not derived): ``vitplast.measure.gauge.RATE_FACTORS``."""
    return {p: {c.name: c.factor(p) for c in table} for p in _PROTOCOLS}


def modules(table=TABLE) -> dict[str, str | None]:
    """Name -> module path inside a block of each component of ``table``, in its order (None
    for a unit that is no single module)."""
    return {c.name: c.module for c in table}


def group(name: str, table=TABLE) -> tuple[str, ...]:
    """The names of ``table``'s components of the group ``name`` (one of ``GROUPS``), in its
    order: the paper's gap is between the ``"linear"`` and the ``"norm"`` ones."""
    if name not in GROUPS:
        raise ValueError(f"unknown group {name!r}; valid: {list(GROUPS)}")
    return tuple(c.name for c in table if c.group == name)


#: Paper name -> module path inside a block, in block order (``modules()``).
COMPONENTS = modules()
#: The two groups the paper's gap is between (Table 1, Takeaway 3): attention and the MLP
#: linears (~28M parameters each on ViT-B), and the LayerNorms (18K each) (``group``).
LINEARS = group("linear")
NORMS = group("norm")


def check_supported(model: nn.Module, components=TABLE) -> None:
    """Raise a clear error unless ``model`` has hookable ViT blocks with every module that a
    component of ``components`` is or is read at (``Component.taps``).

    timm's EVA, for example, applies its qkv projection functionally inside ``attn`` and has
    no ``norm1 -> attn(qkv, proj)`` layout that hooks can observe the same way.
    """
    from torch import nn

    name = type(model).__name__
    if name == "Eva" or "eva" in str(getattr(model, "pretrained_cfg", {}).get("architecture", "")):
        raise TypeError("timm's EVA applies qkv functionally (with rotary embeddings), so "
                        "component hooks would not see the same computation; use a "
                        "VisionTransformer (vit_*, deit_*, vit_*_dinov2)")
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, (nn.Sequential, nn.ModuleList)) or len(blocks) == 0:
        raise TypeError(f"{name} has no `blocks` sequence: vitplast supports timm "
                        "VisionTransformer models (ViT, DeiT, DINOv2-style with LayerScale)")
    paths = tap_paths(components)
    for i, block in enumerate(blocks):
        for comp in components:
            for path in {t.path for t in comp.taps} | ({comp.module} - {None}):
                if submodule(block, path) is None:
                    raise TypeError(f"{name}.blocks[{i}] has no `{path}` ({comp.name}); "
                                    f"expected a pre-norm ViT block with {list(paths)}")
        attn = block.attn
        if not (isinstance(getattr(attn, "qkv", None), nn.Linear)
                and isinstance(getattr(attn, "proj", None), nn.Linear)):
            raise TypeError(f"{name}.blocks[{i}].attn ({type(attn).__name__}) has no fused "
                            "`qkv` and `proj` linears: MHA bounds and counts need them")


def submodule(root: nn.Module, path: str):
    """The module at a dotted ``path`` inside ``root`` (``"mlp.fc1"``), or None."""
    for part in path.split("."):
        root = getattr(root, part, None)
        if root is None:
            return None
    return root


def tap_paths(components=TABLE) -> tuple[str, ...]:
    """The module paths inside a block that a table's taps read, in the table's order."""
    return tuple(dict.fromkeys(t.path for c in components for t in c.taps))


def check_component(component: str, components=TABLE) -> str:
    """Return ``component`` if it names a row of ``components``, else raise naming them."""
    if component not in names(components):
        raise ValueError(f"unknown component {component!r}; valid: {list(names(components))}")
    return component


def component_modules(model: nn.Module, components=TABLE) -> dict[tuple[int, str], nn.Module]:
    """(layer, component) -> module, for every block of a supported model and every component
    of ``components`` that is a module (``Component.module``)."""
    check_supported(model, components)
    return {(i, c.name): submodule(block, c.module) for i, block in enumerate(model.blocks)
            for c in components if c.module is not None}


def component_of(param_name: str, table=TABLE) -> str:
    """The group a parameter belongs to: a component name (the first of ``table`` whose
    patterns match), ``head``, ``norm``, ``other`` or ``embedding``."""
    for comp in table:
        if any(fnmatch.fnmatch(param_name, p) for p in comp.patterns):
            return comp.name
    if param_name.startswith("head"):
        return "head"
    if param_name.startswith(("norm.", "fc_norm.")):
        return "norm"
    if fnmatch.fnmatch(param_name, "blocks.*"):
        return "other"  # LayerScale, ...
    return "embedding"


def count_parameters(model: nn.Module, component: str, components=TABLE) -> int:
    """Number of parameters ``component`` trains (its patterns), summed over all blocks
    (exact)."""
    patterns = by_name(components)[check_component(component, components)].patterns
    return sum(p.numel() for n, p in model.named_parameters()
               if any(fnmatch.fnmatch(n, pat) for pat in patterns))


__all__ = ["COMPONENTS", "GROUPS", "LINEARS", "NORMS", "TABLE", "Component", "Tap", "by_name",
           "check_component", "check_supported", "component_modules", "component_of",
           "count_parameters", "extended", "fingerprint", "group", "module_component", "modules",
           "names", "rate_factors", "submodule", "tap_paths"]
