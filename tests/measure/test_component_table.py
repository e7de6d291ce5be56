"""The component table (``vitplast.measure.components.TABLE``): the views the package reads
(names, groups, configurations, gauge factors, bounds, colours, the schemas' component names)
follow its five rows; and a sixth unit that is no single module, the attention branch
x -> x + MHA(LN1(x)), is ONE row (``ATTN_BRANCH``): measured (hooked rates == a direct
recomputation, both protocols), ranked, stored, schema-valid and drawn in its colour, while
the table itself stays five rows."""

import math
import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import matplotlib.colors
import matplotlib.pyplot
import pandas as pd
import pytest
import seaborn
import torch
from helpers import tiny_vit

import vitplast
from vitplast import schema
from vitplast.measure import bounds, components, gauge, plasticity, rates, relative
from vitplast.measure.components import Component, Tap
from vitplast.report import plot_style, plots
from vitplast.train import configurations

#: The sixth unit: timm's Block computes x = x + drop_path(ls1(attn(norm1(x)))) and norm2
#: reads that sum, so the branch's input is norm1's input and its output norm2's input. Under
#: the gauge its input and output are both the stream (c x): its rate is unchanged under
#: ``hidden``; under ``embedding`` attention is not scale-invariant: no factor derived.
ATTN_BRANCH = Component(
    name="ATTN_BRANCH", group="branch", taps=(Tap("norm1", "input"), Tap("norm2", "input")),
    module=None, gauge=(("hidden", 0), ("embedding", None)),
    patterns=("blocks.*.norm1.*", "blocks.*.attn.*", "blocks.*.ls1.*"), bound=None,
    colour="#117733")

FIVE = ("LN1", "MHA", "LN2", "FC1", "FC2")


def _branch(block, h):
    """The attention branch of a timm Block, written out: h + ls1(attn(norm1(h)))."""
    return h + block.drop_path1(block.ls1(block.attn(block.norm1(h))))


def _direct_branch_rates(model, x, y, protocol):
    """Per layer, |f(x) - f(y)| / |x - y| of the branch on its input under ``protocol``: the
    stream entering the block (``hidden``, run block by block) or the embedding."""
    hx, hy, out = rates.embed(model, x), rates.embed(model, y), {}
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            num = (_branch(block, hx) - _branch(block, hy)).flatten(1).norm(dim=1)
            out[layer] = num / (hx - hy).flatten(1).norm(dim=1)
            if protocol == "hidden":
                hx, hy = block(hx), block(hy)
    return out


def test_the_views_are_the_five_rows():
    table = components.TABLE
    assert components.names() == FIVE == tuple(components.COMPONENTS)
    assert components.COMPONENTS == {c.name: c.module for c in table}
    assert components.LINEARS == ("MHA", "FC1", "FC2") and components.NORMS == ("LN1", "LN2")
    assert {c: configurations.CONFIGS[c] for c in FIVE} == {
        c.name: [f"blocks.*.{c.module}.*"] for c in table}
    assert configurations.CONFIG_ORDER == ("full", "head", "MHA", "FC1", "FC2", "LN2", "LN1")
    assert all(plot_style.PALETTE[c.name] == c.colour for c in table)
    assert {c.bound for c in table} == set(bounds.STATISTICS)
    for protocol, factors in gauge.RATE_FACTORS.items():
        assert list(factors) == list(FIVE)
        assert [None if f is None else f(8.0) for f in factors.values()] == {
            "hidden": [1 / 8.0, 8.0, 1 / 8.0, 1.0, 8.0],
            "embedding": [1 / 8.0, None, 1 / 8.0, 1.0, 8.0]}[protocol]


def test_the_schemas_component_names_are_the_tables_given_where_used():
    """The published schema holds no copy of the names: a component is any name, and the
    names of the table measured with are checked when given (``components=``)."""
    record = dict(task="digits", n_pairs=2, protocol="hidden",
                  rows=[dict(layer=0, component="QKV", plasticity=1.0, ci95=0.1)])
    assert "enum" not in schema.document("plasticity")["$defs"]["component"]
    assert schema.problems("plasticity", record) == []
    assert schema.problems("plasticity", record, components=components.names()) == [
        f"rows[0].component='QKV' is not valid: expected one of {list(FIVE)} "
        f"({schema.document('plasticity')['$defs']['component']['description']})"]
    assert schema.problems("plasticity", dict(record, rows=[dict(record["rows"][0],
                                                                component="")])) != []


def test_the_fingerprint_is_short_stable_and_follows_the_table():
    fp = components.fingerprint()
    assert len(fp) == 12 and int(fp, 16) >= 0
    assert fp == components.fingerprint(tuple(components.TABLE))
    assert components.fingerprint(components.extended(ATTN_BRANCH)) != fp
    moved = components.TABLE[:4] + (components.module_component(
        "FC2", "linear", "mlp.fc2", hidden=1, embedding=None, bound="linear_bound",
        colour="#66CCEE"),)
    assert components.fingerprint(moved) != fp  # one gauge factor changed


def test_extended_refuses_a_bad_row_naming_it():
    with pytest.raises(ValueError, match="twice"):
        components.extended(components.TABLE[0])
    with pytest.raises(ValueError, match="ODD"):
        components.extended(Component("ODD", "branch", (Tap("norm1", "in"), Tap("norm2", "input")),
                                      None, (("hidden", 0), ("embedding", None)), (), None, "#000"))
    with pytest.raises(TypeError, match="no `norm3`"):
        components.check_supported(tiny_vit(), components.extended(Component(
            "ODD", "branch", (Tap("norm1", "input"), Tap("norm3", "input")), None,
            (("hidden", 0), ("embedding", None)), (), None, "#000")))


@pytest.mark.parametrize("protocol", ["hidden", "embedding"])
@pytest.mark.parametrize("variant", [{}, dict(init_values=1e-5, reg_tokens=4)])
def test_a_sixth_unit_is_one_row_measured_ranked_stored_and_valid(images, protocol, variant):
    model, (x, y) = tiny_vit(**variant), images
    table = components.extended(ATTN_BRANCH)  # the one row; components.TABLE is unchanged

    # measured: each pair's rate equals the branch recomputed by hand
    got = plasticity.measure(model, x, y, protocol=protocol, progress=False, components=table)
    direct = _direct_branch_rates(model, x, y, protocol)
    for layer, want in direct.items():
        rows = got[(got["layer"] == layer) & (got["component"] == "ATTN_BRANCH")]
        torch.testing.assert_close(torch.tensor(rows["rate"].to_numpy()), want,
                                   rtol=1e-5, atol=1e-6)
    # ... and the five keep their numbers, bit for bit, in their order
    five = plasticity.measure(model, x, y, protocol=protocol, progress=False)
    kept = got[got["component"] != "ATTN_BRANCH"].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept.astype({"component": str}),
                                  five.astype({"component": str}))
    assert list(got["component"].cat.categories) == [*FIVE, "ATTN_BRANCH"]
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())

    # ranked
    ranked = plasticity.ranking(got)
    assert set(ranked["component"]) == {*FIVE, "ATTN_BRANCH"}
    assert sorted(ranked["rank"]) == list(range(1, 7))

    # stored, as the plasticity companion file stores its rows, and schema-valid with the
    # extended table (the five's names refuse the sixth)
    summary = plasticity.summarize(got)
    record = dict(task="digits", n_pairs=len(x), protocol=protocol, rows=[
        dict(layer=int(r.layer), component=str(r.component), plasticity=float(r.plasticity),
             ci95=float(r.ci95)) for r in summary.itertuples()])
    assert "ATTN_BRANCH" in {r["component"] for r in record["rows"]}
    assert schema.check("plasticity", record, components=components.names(table)) is record
    assert any("ATTN_BRANCH" in p for p in schema.problems("plasticity", record,
                                                           components=components.names()))
    rel = relative.measure(model, x, y, protocol=protocol, components=table)
    stored = dict(task="digits", n_pairs=len(x), protocol=protocol,
                  quantity="relative plasticity",
                  rows=rel.drop(columns="protocol").astype({"component": str})
                  .to_dict("records"))
    assert not schema.problems("plasticity", stored, components=components.names(table))

    # drawn, in its row's colour (seaborn's boxes a little desaturated), after the five; the
    # default figures draw the five
    branch = matplotlib.colors.to_rgb(ATTN_BRANCH.colour)
    for figure, colour in ((plots.plasticity_box, seaborn.desaturate(branch, 0.75)),
                           (plots.plasticity_by_layer, branch)):
        fig = figure(summary.assign(protocol=protocol), components=table)
        assert _drawn(fig) == [*FIVE, "ATTN_BRANCH"], figure.__name__
        drawn = {c for ax in fig.axes for c in _colours(ax)}
        assert any(math.dist(colour, c) < 1e-6 for c in drawn), figure.__name__
        five = summary[summary["component"] != "ATTN_BRANCH"].assign(protocol=protocol)
        assert _drawn(figure(five)) == list(FIVE)
        matplotlib.pyplot.close("all")
    fig = plots.rate_distributions(got.assign(protocol=protocol), components=table)
    assert _drawn(fig) == [*FIVE, "ATTN_BRANCH"]
    matplotlib.pyplot.close("all")

    # removed: the table, its views and the published schema are the five again
    assert components.names() == FIVE and tuple(components.COMPONENTS) == FIVE


def _drawn(fig) -> list[str]:
    """The components a figure draws: its legend's entries, else its x tick labels."""
    legends = fig.legends or [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    if legends:
        return [t.get_text() for legend in legends for t in legend.get_texts()]
    return [t.get_text() for t in fig.axes[0].get_xticklabels()]


def _colours(ax) -> set[tuple]:
    """The RGB colours of an axis's lines and patches (boxes, violins, bands)."""
    import matplotlib.colors as mcolors

    out = {mcolors.to_rgb(line.get_color()) for line in ax.get_lines()}
    out |= {tuple(p.get_facecolor()[:3]) for p in ax.patches}
    for c in ax.collections:
        out |= {tuple(rgba[:3]) for rgba in c.get_facecolor()}
    return out


def test_the_sixth_units_gauge_factor_and_its_missing_bound():
    """Under the gauge the branch reads and writes the stream: its rate is unchanged
    (``hidden``, factor 1, up to LayerNorm's eps); it has no bound: its statistics are NaN
    and ``model_bounds`` leaves it out."""
    model = tiny_vit()
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 1, 16, 16, generator=g), torch.randn(8, 1, 16, 16, generator=g)
    table = components.extended(ATTN_BRANCH)
    c = 8.0
    at = [plasticity.measure(m, x, y, progress=False, components=table)
          for m in (model, gauge.rescale_stream(tiny_vit(), c))]
    branch = [m[m["component"] == "ATTN_BRANCH"]["rate"].to_numpy() for m in at]
    assert ATTN_BRANCH.factor("hidden")(c) == 1.0 and ATTN_BRANCH.factor("embedding") is None
    torch.testing.assert_close(torch.tensor(branch[1]), torch.tensor(branch[0]), rtol=1e-3,
                               atol=0)
    m = plasticity.measurement(model, x, y, progress=False, components=table)
    stats = m.statistics.set_index(["layer", "component"])
    assert math.isnan(stats.loc[(0, "ATTN_BRANCH"), "sigma"])
    bounded = bounds.model_bounds(model, m.statistics, components=table)
    assert set(bounded["component"]) == set(FIVE)
    pd.testing.assert_frame_equal(bounded, bounds.model_bounds(
        model, m.statistics[m.statistics["component"] != "ATTN_BRANCH"]))


def test_the_sixth_unit_trains_its_patterns():
    model = tiny_vit()
    table = components.extended(ATTN_BRANCH)
    assert components.count_parameters(model, "ATTN_BRANCH", table) == sum(
        components.count_parameters(model, c) for c in ("LN1", "MHA"))  # ls1 is Identity
    assert configurations.configs(table)["ATTN_BRANCH"] == list(ATTN_BRANCH.patterns)
    assert configurations.trainable_names(model, "ATTN_BRANCH", train_head=False, table=table) \
        == [n for n, _ in model.named_parameters() if n.startswith("blocks.")
            and n.split(".")[2] in ("norm1", "attn", "ls1")]
    assert configurations.config_order(table)[-1] == "ATTN_BRANCH"  # after the paper's five
    with pytest.raises(ValueError, match="ATTN_BRANCH"):
        components.count_parameters(model, "ATTN_BRANCH")  # not in the five


#: A program that makes a sixth row permanent, as an edit of ``components.py`` would (the
#: module's source, one row added to ``TABLE``, is what ``vitplast.measure.components`` is in
#: that process), then runs the kit through it: every module imports, the shipped studies'
#: runs are unchanged, the estimator measures the row (== a recomputation by hand), notebook
#: 02's cached pipeline measures, stamps and reads it back (as the other caches do: a table the
#: five measured is not served), and its stored table passes the schema.
_SIXTH_ROW = r'''
import importlib, pkgutil, re, sys
from pathlib import Path

import vitplast.measure

path = Path(vitplast.measure.__file__).parent / "components.py"
text = path.read_text()
end = text.index("\n)\n", text.index("TABLE: tuple[Component, ...] = ("))
text = text[:end] + """
    module_component("PROJ", "linear", "attn.proj", hidden=1, embedding=None,
                     bound="linear_bound", colour="#117733"),""" + text[end:]
spec = importlib.util.spec_from_loader("vitplast.measure.components", loader=None,
                                       origin=str(path))
module = importlib.util.module_from_spec(spec)
module.__file__ = str(path)
sys.modules[spec.name] = vitplast.measure.components = module
exec(compile(text, str(path), "exec"), module.__dict__)

import json

import numpy as np
import pandas as pd
import torch
from timm.models.vision_transformer import VisionTransformer

import vitplast
from vitplast import cached, frames, schema
from vitplast.experiments import studies
from vitplast.experiments.runs import run_hash
from vitplast.measure import components, empirical, fingerprint, plasticity
from vitplast.report import plot_style
from vitplast.train import configurations

SIX = ("LN1", "MHA", "LN2", "FC1", "FC2", "PROJ")
assert components.names() == SIX and components.LINEARS == ("MHA", "FC1", "FC2", "PROJ")
# every module imports
for info in pkgutil.walk_packages(vitplast.__path__, "vitplast."):
    importlib.import_module(info.name)
assert plot_style.PALETTE["PROJ"] == "#117733"
assert configurations.CONFIG_ORDER[-1] == "PROJ" and "PROJ" in configurations.CONFIGS

# the studies declared before the row run what they ran: their run hashes name the shipped records
for names in (("main", "budget"), ("confounds",)):
    root = Path(studies.get(names[0]).root())
    shipped = {p.stem for p in root.glob("*.json") if re.fullmatch("[0-9a-f]{16}", p.stem)}
    assert {run_hash(r) for n in names for r in studies.get(n).runs()} == shipped, names

# measured: the row's rates are attn.proj's, recomputed by hand
torch.manual_seed(0)
model = VisionTransformer(img_size=16, patch_size=4, in_chans=1, num_classes=5, embed_dim=32,
                          depth=2, num_heads=4).eval()
g = torch.Generator().manual_seed(1)
x, y = torch.randn(6, 1, 16, 16, generator=g), torch.randn(6, 1, 16, 16, generator=g)
got = plasticity.measure(model, x, y, protocol="hidden", progress=False)
assert list(got["component"].cat.categories) == list(SIX)
seen = {}
hooks = [block.attn.proj.register_forward_hook(
    lambda m, i, o, k=k: seen.setdefault(k, []).append((i[0], o))) for k, block in
    enumerate(model.blocks)]
with torch.no_grad():
    model(x), model(y)
for h in hooks:
    h.remove()
for layer, ((ix, ox), (iy, oy)) in seen.items():
    want = (ox - oy).flatten(1).norm(dim=1) / (ix - iy).flatten(1).norm(dim=1)
    rows = got[(got["layer"] == layer) & (got["component"] == "PROJ")]
    torch.testing.assert_close(torch.tensor(rows["rate"].to_numpy()), want, rtol=1e-5,
                               atol=1e-6)

# notebook 02's cached pipeline: measured with the six, stamped with their fingerprint, read back
calls = []
real = empirical.measure
empirical.measure = lambda *a, **k: calls.append(1) or real(*a, **k)
study = empirical.plasticity_study("vitplast_fmnist", ["digits"], n_pairs=8, batch_size=8)
again = empirical.plasticity_study("vitplast_fmnist", ["digits"], n_pairs=8, batch_size=8)
assert len(calls) == 2 and set(study["component"]) == set(SIX)
pd.testing.assert_frame_equal(study, again)
[table] = (cached._folder(None)).glob("plasticity-*.npz")
now = fingerprint.measuring()
assert frames.entries(table)["measured_by"] == now != cached.MEASURING_CODE

# every measure-layer cache stamps the six's fingerprint: a table the five measured (stamped
# with their code, under the same key) is never served, it is measured again
rates = empirical.task_rates("vitplast_fmnist", "digits", n_pairs=8, batch_size=8)
[kept] = (cached._folder(None)).glob("task-rates-*.npz")
assert frames.entries(kept)["measured_by"] == now and set(rates["component"]) == set(SIX)
with np.load(kept, allow_pickle=False) as z:
    arrays = {k: z[k] for k in z.files if k != "measured_by"}
np.savez(kept, measured_by=np.asarray(json.dumps(cached.MEASURING_CODE)), **arrays)
empirical.task_rates("vitplast_fmnist", "digits", n_pairs=8, batch_size=8)
assert len(calls) == 4 and frames.entries(kept)["measured_by"] == now

# its table stored, validated: the published schema and the table's names
summary = plasticity.summarize(study[study["protocol"] == "hidden"])
record = dict(task="digits", n_pairs=8, protocol="hidden", rows=[
    dict(layer=int(r.layer), component=str(r.component), plasticity=float(r.plasticity),
         ci95=float(r.ci95)) for r in summary.itertuples()])
assert {r["component"] for r in record["rows"]} == set(SIX)
assert schema.check("plasticity", record) is record
assert schema.check("plasticity", record, components=components.names()) is record
# and written beside a study, checked with the six's names (those of the table measured)
cached.write_companion(".", "plasticity-0.json", record, **fingerprint.stamp())
print("ok")
'''


def test_a_permanent_sixth_row_needs_no_other_file(tmp_path):
    """A row added to ``TABLE`` itself (not passed as a value) runs through the whole kit with
    no other file changed: imports, the shipped studies (their runs' hashes), the estimator, a
    notebook's cached pipeline (its stamp is the six's fingerprint) and the schema of its
    stored table."""
    root = Path(vitplast.__file__).resolve().parents[1]
    env = dict(os.environ, VITPLAST_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _SIXTH_ROW], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
