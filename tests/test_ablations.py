"""Confound ablations: function preservation, plasticity scaling, masks, adapters, counts."""

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import acc_table, tiny_vit, toy_task
from scipy import stats

from vitplast import (
    ablations,
    components,
    confounds,
    findings,
    finetune,
    plasticity,
    results,
    runs,
    studies,
    sweep,
)


@pytest.mark.parametrize("ln", ["LN1", "LN2"])
def test_function_preserving_rescale(ln, images):
    model, x = tiny_vit(), images[0]
    before = model(x)
    ablations.rescale_layernorm(model, ln, 7.0, preserve=True)
    torch.testing.assert_close(model(x), before, rtol=1e-5, atol=1e-5)
    raw = ablations.rescale_layernorm(tiny_vit(), ln, 7.0, preserve=False)
    assert (raw(x) - before).abs().max() > 1e-2


@pytest.mark.parametrize("ln", ["LN1", "LN2"])
def test_rescale_multiplies_layernorm_plasticity_by_c(ln, images):
    base = plasticity.batch_rates(tiny_vit(), *images)
    scaled = plasticity.batch_rates(ablations.rescale_layernorm(tiny_vit(), ln, 3.0), *images)
    for layer in range(2):
        torch.testing.assert_close(scaled[(layer, ln)], 3.0 * base[(layer, ln)], rtol=1e-4, atol=0)
        other = "LN2" if ln == "LN1" else "LN1"
        torch.testing.assert_close(scaled[(layer, other)], base[(layer, other)], rtol=1e-4, atol=0)
    assert ablations.matching_scale(0.5, 4.0) == 8.0


def test_rescale_errors():
    with pytest.raises(ValueError, match="\\['LN1', 'LN2'\\]"):
        ablations.rescale_layernorm(tiny_vit(), "FC1", 2.0)
    with pytest.raises(ValueError, match="> 0"):
        ablations.rescale_layernorm(tiny_vit(), "LN1", 0.0)


def test_sparse_masks_train_exactly_count_entries():
    model = tiny_vit()
    count = components.count_parameters(model, "LN1")
    masks = ablations.sparse_masks(model, "FC1", count, seed=1)
    assert sum(int(m.sum()) for m in masks.values()) == count
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = finetune.train(model, toy_task(), steps=3, batch_size=16, lr=0.5, config="FC1",
                            grad_masks=masks, progress=False)
    head = sum(p.numel() for n, p in model.named_parameters()
               if components.component_of(n) in ("head", "norm"))
    assert result.trainable == count + head
    row = result.history[0]  # per parameter: over the trainable entries only
    assert row["grad_norm_per_param/FC1"] == pytest.approx(row["grad_norm/FC1"] / count ** 0.5)
    changed = 0
    for n, m in masks.items():
        p = dict(model.named_parameters())[n]
        assert torch.equal(p[~m], before[n][~m]), n
        changed += int((p[m] != before[n][m]).sum())
    assert changed > count // 2
    with pytest.raises(ValueError, match="weight_decay=0"):
        finetune.train(tiny_vit(), toy_task(), steps=1, config="FC1", weight_decay=0.1,
                       grad_masks=masks, progress=False)
    with pytest.raises(ValueError, match="1\\.\\."):
        ablations.sparse_masks(model, "LN1", 10**9)


@pytest.mark.parametrize("component", ["MHA", "FC1", "FC2"])
def test_lora_starts_as_identity_and_merges_exactly(component, images):
    model, x = tiny_vit(), images[0]
    before = model(x)
    ablations.add_lora(model, component, rank=2)
    torch.testing.assert_close(model(x), before)
    n_lora = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
    assert n_lora == ablations.lora_count(model, component, 2)
    finetune.train(model, toy_task(), steps=2, batch_size=16, lr=0.5,
                   config=ablations.LORA_PATTERNS, progress=False)
    adapted = model(x)
    assert (adapted - before).abs().max() > 1e-4
    ablations.merge_lora(model)
    assert not any("lora_" in n for n, _ in model.named_parameters())
    torch.testing.assert_close(model(x), adapted, rtol=1e-4, atol=1e-5)


def test_lora_rank_for_a_budget():
    model = tiny_vit()  # d = 32: FC1 rank 1 costs (32 + 128) per block, 2 blocks
    assert ablations.lora_count(model, "FC1", 1) == 320
    assert ablations.rank_for_budget(model, "FC1", 1000) == 3
    assert ablations.lora_count(model, "MHA", 1) == 2 * ((32 + 96) + (32 + 32))


def test_bias_only_counts_are_exact():
    model = tiny_vit()
    d, blocks = 32, 2
    expected = {"LN1": d, "MHA": 3 * d + d, "LN2": d, "FC1": 4 * d, "FC2": d}
    for comp, per_block in expected.items():
        names = components.trainable_names(model, ablations.BIAS_ONLY[comp], train_head=False)
        assert sum(dict(model.named_parameters())[n].numel() for n in names) == blocks * per_block


def test_ablations_run_through_the_sweep(tmp_path):
    config = runs.run_config("digits", "FC2", lr=0.01, pretrained=False, steps=2,
                              batch_size=16, prepare="sparse",
                              ablation=dict(component="FC2", count=100))
    record = sweep.run_one(config)
    assert record["status"] == "ok", record["error"]
    head = 128 * 10 + 10 + 2 * 128
    assert record["trainable"] == 100 + head


def test_variants_and_their_exact_counts():
    model = tiny_vit()
    table = confounds.variants(model, {"LN1": 4.0})
    assert {"LN1 x 4 (preserved)", "LN1 x 4 (raw)", "LN1 lr/c^2 (c=4)", "FC1 sparse",
            "MHA LoRA r1", "FC2 bias"} <= set(table)
    counts = dict(confounds.variant_counts(model, table).values.tolist())
    head = sum(p.numel() for n, p in model.named_parameters()
               if components.component_of(n) in ("head", "norm"))
    ln1 = components.count_parameters(model, "LN1")
    assert counts["FC1 sparse"] == counts["MHA sparse"] == ln1 + head
    assert counts["LN1 x 4 (preserved)"] == counts["LN1 lr/c^2 (c=4)"] == ln1 + head
    # matched families: every member trains exactly the same number of backbone entries
    lora = ablations.lora_count(model, "FC1", 1)  # FC1 and FC2 (5d per block) < MHA (6d)
    assert counts["MHA LoRA r1"] == counts["FC1 LoRA r1"] == counts["FC2 LoRA r1"] == lora + head
    assert lora < ablations.lora_count(model, "MHA", 1)
    bias = {counts[f"{c} bias"] for c in components.COMPONENTS}
    assert bias == {2 * 32 + head}  # d per block: FC2's and the betas; MHA's 4d, FC1's masked
    for name, kw in table.items():
        if "count" in kw.get("ablation", {}):
            assert counts[name] == kw["ablation"]["count"] + head, name
    configs = runs.grid(["digits"], list(table.values())[:2], [0.01], [0], pretrained=False)
    assert configs[0]["ablation"]["variant"] == "LN1 x 4 (preserved)"


def test_the_confound_study_is_its_parts_and_nothing_else():
    """Exact run counts per part of the confound study; every variant a part names exists;
    the per-layer configurations train exactly one block's component. The shipped scales are
    read (the same settings), never re-measured into the shipped store."""
    from vitplast import studies
    from vitplast.runs import run_hash

    parts = confounds.part_runs(studies.get("confounds").spec)
    sizes = {name: len(r) for name, r in parts.items()}
    assert sizes == {"matched sparse": 3 * 6 * 5 * 3, "per layer": 6 * (5 + 5 + 7) * 3 * 3,
                     "from init": (7 + 3 * 5 + 3 * 5) * 2 * 3, "matched LoRA": 3 * 5 * 5 * 3,
                     "matched bias": (5 + 6 + 5) * 5 * 3, "AdamW": (5 + 5) * 5 * 3,
                     "rescale": 6 * 5 * 2 * 3, "rescale, no clip": 3 * 5 * 2 * 3}
    every = confounds.study_runs(studies.get("confounds").spec)
    assert len({run_hash(r) for r in every}) == len(every) == sum(sizes.values()) == 2295
    assert {r["checkpoint"] for r in parts["from init"]} == {"init"}
    assert {r["clip_grad_norm"] for r in parts["rescale, no clip"]} == {0.0}
    assert {r["optimizer"] for r in parts["AdamW"]} == {"adamw"}
    model = tiny_vit()
    layer = confounds.layer_variants(model)
    assert len(layer) == 3 * len(model.blocks)
    counts = dict(confounds.variant_counts(model, layer).values.tolist())
    head = sum(p.numel() for n, p in model.named_parameters()
               if components.component_of(n) in ("head", "norm"))
    per_block = {c: components.count_parameters(model, c) // len(model.blocks)
                 for c in ("LN1", "MHA", "FC1")}
    for name, n in counts.items():
        assert n == per_block[name.split()[0]] + head, name
    with pytest.raises(ValueError, match="matches no variant; valid"):
        confounds.part_runs(dict(studies.get("confounds").spec, parts=[dict(  # shipped scales
            name="x", tasks=["digits"], lrs={"MHA sparsest": [0.1]})]))


def _rescaled_and_control(ln: str, c: float, **kw):
    """Train the preserved rescale of ``ln`` at lr and the plain model with ``ln``'s LR divided
    by c^2, from one init and seed, the head training too; return both models and histories."""
    kw = dict(steps=6, batch_size=16, lr=0.5, config=ln, log_every=1, eval_every=100,
              progress=False, keep_best=False, **kw)
    rescaled = ablations.rescale_layernorm(tiny_vit(), ln, c)
    control = tiny_vit()
    path = components.COMPONENTS[ln]
    a = finetune.train(rescaled, toy_task(), **kw)
    b = finetune.train(control, toy_task(), lr_scales={f"blocks.*.{path}.*": 1 / c**2}, **kw)
    return rescaled, control, a.history, b.history


@pytest.mark.parametrize("ln", ["LN1", "LN2"])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_preserved_rescale_is_an_lr_change_without_clipping(ln, momentum):
    """SGD with any momentum, weight decay 0, no clipping, the LayerNorm and the head training:
    the whole trajectory of the preserved rescale (gamma, beta x c; next linear / c) is the
    plain model's with the LayerNorm's LR / c^2. Why: the function is the same, so the head
    gets the same gradient; the LayerNorm's gradient in rescaled units is g / c, a step of
    lr g / c there is lr g / c^2 in the original units, and momentum is linear in the steps."""
    c = 4.0
    rescaled, control, ha, hb = _rescaled_and_control(ln, c, momentum=momentum,
                                                       clip_grad_norm=None)
    np.testing.assert_allclose([h["loss"] for h in ha], [h["loss"] for h in hb], rtol=1e-5)
    ln_a, ln_b = (dict(m.named_parameters()) for m in (rescaled, control))
    path = components.COMPONENTS[ln]
    for name in (f"blocks.1.{path}.weight", f"blocks.1.{path}.bias"):
        torch.testing.assert_close(ln_a[name] / c, ln_b[name], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(rescaled.head.weight, control.head.weight, rtol=1e-4, atol=1e-6)
    assert not torch.equal(control.head.weight, tiny_vit().head.weight)  # the head trained


def test_global_clipping_breaks_the_equivalence():
    """With a global gradient-norm clip that acts, the LayerNorm's gradient enters the global
    norm as g / c in one model and g in the other: the clip factors differ, and so do the
    trajectories. The break is as large as the LayerNorm's share of the global norm: alone
    (no head), the clipped updates differ by the factor c itself; beside a training head whose
    gradient dominates the norm, the two clip factors can agree to float precision."""
    c = 4.0
    rescaled, control, ha, hb = _rescaled_and_control("LN1", c, momentum=0.9,
                                                       clip_grad_norm=1e-3, train_head=False)
    assert all(h["grad_norm"] > 1e-3 for h in ha + hb)  # the clip acts at every step
    start = tiny_vit().blocks[1].norm1.weight
    moved_a = rescaled.blocks[1].norm1.weight / c - start  # in the original units
    moved_b = control.blocks[1].norm1.weight - start
    assert ((moved_a - moved_b).norm() / moved_b.norm()).item() > 1.0
    assert moved_a.norm().item() == pytest.approx(c * moved_b.norm().item(), rel=0.05)


def test_confound_findings_are_task_level_paired_tests_with_their_counts():
    """MHA sparse beats LN1 by 5, 4, 6, 5, 5 points on five tasks: agrees with the paper after
    Holm; FC1 - FC2 sparse has a single task: never resolved; counts are stated."""
    acc = acc_table(**{"MHA sparse": [80.0, 74, 86, 90, 65], "LN1": [75.0, 70, 80, 85, 60],
                       "FC1 sparse": [80.0, 74, 86, 90, 65], "FC2 sparse": [70.0] + [np.nan] * 4,
                       "MHA": [81.0, 75, 87, 90, 66]})
    counts = {"MHA sparse": 1536, "LN1": 1536, "FC1 sparse": 1536, "FC2 sparse": 1536,
              "MHA": 396288, **{f"LN1 block {k}": 256 for k in range(6)}}
    layers = pd.DataFrame(dict(task=["t0", "t1", "t2"], component="LN1", spearman=[0.9, 0.8, 1.0],
                               spearman_depth=[0.5, 0.6, 0.7], plasticity_depth=[0.2, 0.3, 0.1],
                               n_blocks=6))
    layers["partial"] = [confounds.partial_correlation(*r) for r in layers[
        ["spearman", "plasticity_depth", "spearman_depth"]].to_numpy()]
    grads = pd.DataFrame(columns=["task", "config", "kind", "grad_norm"])
    t = dict(acc=acc, counts=counts, corr=layers, grads=grads)
    table = findings.confounds(t).set_index("claim")
    first = table.loc["MHA - LN1 at LN1's count (sparse MHA)"]
    diffs = np.array([5.0, 4, 6, 5, 5])
    assert first["n"] == 5 and first["measured"] == pytest.approx(diffs.mean())
    assert first["p"] == pytest.approx(stats.ttest_1samp(diffs, 0).pvalue)
    assert first["counts"] == "1,536 vs 1,536" and first["verdict"] == "agrees with the paper"
    same = table.loc["MHA - FC1 at LN1's count (sparse)"]  # identical columns: no difference
    assert same["measured"] == 0 and same["verdict"].startswith("not resolved")
    lone = table.loc["FC1 - FC2 at LN1's count (sparse)"]
    assert lone["n"] == 1 and lone["family"] == "descriptive"  # never in a test family
    rho = table.loc["LN1 of one block: Spearman(plasticity, test accuracy) over the blocks, "
                    "partial on the block index"]
    assert rho["n"] == 3 and rho["measured"] == pytest.approx(layers["partial"].mean())
    assert rho["counts"] == "256 per block"  # one count over the blocks: the design's point
    depth = table.loc["one block at a time, mean over components: Spearman(earlier block, test "
                      "accuracy) over the blocks"]
    assert depth["n"] == 3 and depth["measured"] == pytest.approx(0.6)
    assert table.loc["MHA - LN1 under AdamW", "n"] == 0  # no runs yet: stated, not dropped
    ps = table["p"].dropna()
    assert table.loc[ps.index, "p_holm"].tolist() == pytest.approx(
        list(findings.holm(ps.to_numpy())))
    # declared primaries: the MHA - LN1 contrast leads as one, and is not repeated
    declared = findings.confounds(t, primaries=studies.get("confounds").primaries)
    p2 = declared.set_index("claim").loc["MHA at LN1's count (sparse) - LN1, test accuracy"]
    assert p2["family"] == "primary" and p2["measured"] == 5.0 and p2["level"] == 0.025
    assert "MHA - LN1 at LN1's count (sparse MHA)" not in set(declared["claim"])


def test_monotone_plasticity_leaves_the_per_layer_row_descriptive():
    layers = pd.DataFrame(dict(task=["t0", "t1", "t2"], component="LN1", spearman=0.9,
                               spearman_depth=0.5, plasticity_depth=1.0, partial=np.nan,
                               n_blocks=6))
    t = dict(acc=acc_table(LN1=[70.0, 71, 72, 73, 74]), counts={}, corr=layers,
             grads=pd.DataFrame(columns=["task", "config", "kind", "grad_norm"]))
    row = findings.confounds(t).set_index("claim").filter(like="LN1 of one block", axis=0)
    assert row["verdict"].iloc[0] == "cannot be told from depth (untested)"


def test_rescale_pairs_compare_each_run_with_its_control_and_state_the_verdict():
    """Without clipping the preserved rescale and its control end identically in every run
    (a diverged pair counts as identical); with clipping one pair differs by 2 points."""
    rows = []
    for lr, seed in ((0.1, 0), (0.1, 1), (1.0, 0)):
        diverged = lr == 1.0
        for variant, acc in (("LN1 x 2 (preserved)", 0.70), ("LN1 lr/c^2 (c=2)", 0.70),
                             ("LN1 x 2 (preserved) (no clip)", 0.70),
                             ("LN1 lr/c^2 (c=2) (no clip)", 0.70)):
            if variant == "LN1 lr/c^2 (c=2)" and seed == 1:
                acc = 0.72
            rows.append(dict(task="t0", variant=variant, lr=lr, seed=seed,
                             status="diverged" if diverged else "ok",
                             test_acc=np.nan if diverged else acc))
    pairs = confounds.rescale_pairs(pd.DataFrame(rows)).set_index("clipping")
    assert pairs.loc["off", ["pairs", "identical"]].tolist() == [3, 3]
    assert pairs.loc["on", ["pairs", "identical"]].tolist() == [3, 2]
    assert pairs.loc["on", "max_diff"] == pytest.approx(2.0)
    grads = pd.DataFrame(columns=["task", "config", "kind", "grad_norm"])
    corr = pd.DataFrame(columns=["task", "component", "spearman", "spearman_depth"])
    t = dict(acc=acc_table(LN1=[70.0]), counts={}, corr=corr, grads=grads,
             rescale=pairs.reset_index())
    table = findings.confounds(t).set_index("claim")
    off = table.loc["LN1 x 2 (preserved) (no clip) vs its lr/c^2 control, run by run (task, LR, "
                    "seed), gradient clipping off"]
    assert off["verdict"] == "equal test accuracy, as derived" and off["n"] == 3
    on = table.loc["LN1 x 2 (preserved) vs its lr/c^2 control, run by run (task, LR, seed), "
                   "gradient clipping on"]
    assert on["verdict"] == "differs, as clipping allows"
    assert on["measured"] == ("2 of 3 pairs with equal status and test accuracy, the largest "
                              "difference 2.00")


def test_study_scales_are_measured_once_and_rounded(tmp_path, monkeypatch):
    from vitplast import empirical, plasticity

    calls = []
    monkeypatch.setattr(empirical, "measure_tasks", lambda *a, **k: calls.append(a) or None)
    monkeypatch.setattr(plasticity, "ranking", lambda rates: pd.DataFrame(dict(
        component=["LN1", "LN2", "FC1", "FC1"], plasticity=[0.3, 0.7, 1.0, 1.1])))
    first = confounds.study_scales(tmp_path, ["digits"], n_pairs=8)
    assert first["scales"] == {"LN1": 3.5, "LN2": 1.5} and len(calls) == 1
    assert first["plasticity"]["FC1"] == pytest.approx(1.05)
    assert confounds.study_scales(tmp_path, ["digits"], n_pairs=8) == first and len(calls) == 1
    confounds.study_scales(tmp_path, ["digits"], n_pairs=16)  # other settings: measured anew
    assert len(calls) == 2 and len(list(tmp_path.glob("scales-*.json"))) == 2


def test_shipped_confound_results_are_the_complete_study(monkeypatch):
    """The shipped records are exactly the runs of the confound study with its shipped
    scales (read, not re-measured), each finished and started from a new head (validation
    accuracy near chance before the first step), on ladders that put every chosen LR inside;
    its baselines are runs of the main study; the per-layer plasticity and the plasticity
    after finetuning are stored for every block and every run they measure."""
    from vitplast import empirical, studies
    from vitplast.runs import run_hash

    monkeypatch.setattr(empirical, "measure_tasks", lambda *a, **k: pytest.fail("re-measured"))
    shipped = results.results(confounds.EMBEDDED_RESULTS)
    study = confounds.study_runs(studies.get("confounds").spec)
    expected = {run_hash(c) for c in study}
    assert set(shipped["run"]) == expected and len(shipped) == len(expected)
    assert shipped["status"].isin(["ok", "diverged"]).all()
    assert (shipped["initial_val_acc"] <= 0.3).all()
    main = {run_hash(c) for c in studies.runs_of(studies.get("main").spec)}
    assert {run_hash(c) for c in studies.confound_baselines(studies.get("confounds"))} <= main
    chosen = confounds.variant_table(confounds.with_variant(shipped))
    settings = confounds.with_variant(pd.json_normalize(study))[["task", "variant"]]
    assert len(chosen) == len(settings.drop_duplicates()) and not chosen["lr_at_edge"].any()
    res = studies.load_confounds("confounds")
    parts = studies.get("confounds").spec["parts"]
    layer_tasks = [p for p in parts if p["name"] == "per layer"][0]["tasks"]
    blocks = res.layers[res.layers["component"].isin(["LN1", "MHA", "FC1"])]
    assert len(blocks.drop_duplicates(["task", "component", "layer"])) == len(layer_tasks) * 3 * 6
    after = studies.get("confounds").spec["after"]
    assert set(map(tuple, res.after[["task", "variant"]].drop_duplicates().to_numpy())) == {
        (task, config) for task in after["tasks"] for config in after["configs"]}


def test_forest_plot_draws_each_row_at_its_difference_and_interval():
    from vitplast import plots

    df = pd.DataFrame(dict(q=["a", "b"], diff_pp=[1.0, -2.0], ci95_pp=[0.5, 1.5],
                           sig=[True, False]))
    ax = plots.differences(df, label="q", significant="sig").axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    bars = [c.lines[2][0].get_segments()[0] for c in ax.containers]
    np.testing.assert_allclose(bars[0], [[0.5, 1.0], [1.5, 1.0]])  # first row on top
    np.testing.assert_allclose(bars[1], [[-3.5, 0.0], [-0.5, 0.0]])
    assert [c.lines[0].get_markerfacecolor() for c in ax.containers][1] == "white"


@pytest.mark.parametrize("family", ["bias", "lora"])
def test_matched_variants_change_exactly_their_count_of_backbone_entries(family):
    """MHA's biases (4d per block) and its rank-1 adapters, masked to a smaller count: after
    training, exactly that many backbone entries moved; every other one is unchanged."""
    model, count = tiny_vit(), 40
    if family == "bias":
        run = dict(config=ablations.BIAS_ONLY["MHA"], ablation=dict(component="MHA", count=count))
        extra = ablations.PREPARE["sparse"](model, run)
    else:
        run = dict(config=ablations.LORA_PATTERNS,
                   ablation=dict(component="MHA", rank=1, count=count))
        extra = ablations.PREPARE["lora"](model, run)
        with torch.no_grad():  # B starts at zero: give it entries whose change shows
            for block in model.blocks:
                block.attn.qkv.lora_b.normal_()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    finetune.train(model, toy_task(), config=run["config"], steps=3, batch_size=16, lr=0.5,
                   train_head=False, progress=False, **extra)
    moved = sum(int((p != before[n]).sum()) for n, p in model.named_parameters())
    assert moved == count


def test_only_settings_with_every_run_stored_are_analysed():
    """A ladder still filling (one of two LRs stored) is left out; a full one is kept."""
    from vitplast import runs

    expected = runs.grid(["digits"], ["MHA", "LN1"], [0.1, 1.0], [0])
    rows = [dict(task="digits", variant=c, lr=lr, status="ok")
            for c, lr in (("MHA", 0.1), ("LN1", 0.1), ("LN1", 1.0))]
    kept = confounds.complete_settings(pd.DataFrame(rows), expected)
    assert sorted(set(kept["variant"])) == ["LN1"] and len(kept) == 2
