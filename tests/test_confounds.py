"""The confound study (``vitplast.confounds``): its variants and their exact counts, its parts
and nothing else, the rescale pairs, the LayerNorm scales measured once, the shipped records
being the complete study, and only complete settings analysed."""

import numpy as np
import pandas as pd
import pytest
from helpers import acc_table, tiny_vit

from vitplast import ablations, components, confounds, findings, results, runs


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


def test_only_settings_with_every_run_stored_are_analysed():
    """A ladder still filling (one of two LRs stored) is left out; a full one is kept."""
    from vitplast import runs

    expected = runs.grid(["digits"], ["MHA", "LN1"], [0.1, 1.0], [0])
    rows = [dict(task="digits", variant=c, lr=lr, status="ok")
            for c, lr in (("MHA", 0.1), ("LN1", 0.1), ("LN1", 1.0))]
    kept = confounds.complete_settings(pd.DataFrame(rows), expected)
    assert sorted(set(kept["variant"])) == ["LN1"] and len(kept) == 2
