"""The confound study (``vitplast.experiments.confounds``): its variants and their exact counts, its
parts and nothing else, the LayerNorm scales measured once, the shipped records
being the complete study, and only complete settings analysed."""

from dataclasses import replace

import pandas as pd
import pytest
from helpers import tiny_vit

from vitplast.experiments import confound_plasticity, confound_variants, confounds, results, runs
from vitplast.experiments.spec_types import Part
from vitplast.measure import components
from vitplast.report import confound_tables
from vitplast.train import ablations


def test_variants_and_their_exact_counts():
    model = tiny_vit()
    table = confound_variants.variants(model, {"LN1": 4.0})
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
    for name, variant in table.items():
        if variant.count is not None:
            assert counts[name] == variant.count + head, name
    configs = runs.grid(["digits"], [v.keywords() for v in list(table.values())[:2]], [0.01],
                        [0], pretrained=False)
    assert configs[0]["ablation"]["variant"] == "LN1 x 4 (preserved)"


def test_the_confound_study_is_its_parts_and_nothing_else():
    """Exact run counts per part of the confound study; every variant a part names exists;
    the per-layer configurations train exactly one block's component. The shipped scales are
    read (the same settings), never re-measured into the shipped store."""
    from vitplast.experiments import studies
    from vitplast.experiments.runs import run_hash

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
    layer = confound_variants.layer_variants(model)
    assert len(layer) == 3 * len(model.blocks)
    counts = dict(confounds.variant_counts(model, layer).values.tolist())
    head = sum(p.numel() for n, p in model.named_parameters()
               if components.component_of(n) in ("head", "norm"))
    per_block = {c: components.count_parameters(model, c) // len(model.blocks)
                 for c in ("LN1", "MHA", "FC1")}
    for name, n in counts.items():
        assert n == per_block[layer[name].component] + head, name
    with pytest.raises(ValueError, match="matches no variant; valid"):
        confounds.part_runs(replace(studies.get("confounds").spec, parts=(Part(  # shipped
            name="x", tasks=("digits",), lrs={"MHA sparsest": [0.1]}),)))


def test_scales_are_measured_once_in_their_own_step_and_only_read_when_runs_are_listed(
        tmp_path, monkeypatch):
    """``measure_scales`` measures (rounded to 3 digits) and saves; again, it reads; other
    settings are measured anew. ``study_scales`` and listing a study's runs only read: with no
    scales file they fail naming the file and the call that measures it."""
    from vitplast.experiments import studies
    from vitplast.measure import empirical, plasticity

    calls = []
    monkeypatch.setattr(empirical, "measure_tasks", lambda *a, **k: calls.append(a) or None)
    monkeypatch.setattr(plasticity, "ranking", lambda rates: pd.DataFrame(dict(
        component=["LN1", "LN2", "FC1", "FC1"], plasticity=[0.3, 0.7, 1.0, 1.1])))
    with pytest.raises(FileNotFoundError, match=r"scales-[0-9a-f]+\.json is missing.*"
                       r"confounds\.measure_scales\(.*\['digits'\], target='FC1', "
                       r"n_pairs=8\)"):
        confounds.study_scales(tmp_path, ["digits"], n_pairs=8)
    spec = replace(studies.get("confounds-smoke").spec, scale_tasks=("digits",), n_pairs=8)
    with pytest.raises(FileNotFoundError, match="measure_scales"):
        confounds.part_runs(spec, tmp_path)
    assert calls == []  # listing measured nothing
    first = confounds.measure_scales(tmp_path, ["digits"], n_pairs=8)
    assert first["scales"] == {"LN1": 3.5, "LN2": 1.5} and len(calls) == 1
    assert first["plasticity"]["FC1"] == pytest.approx(1.05)
    assert confounds.measure_scales(tmp_path, ["digits"], n_pairs=8) == first and len(calls) == 1
    assert confounds.study_scales(tmp_path, ["digits"], n_pairs=8) == first
    assert [r["ablation"]["variant"] for r in confounds.part_runs(spec, tmp_path)[
        "rescale, no clip"]] == ["LN1 x 3.5 (preserved)"]
    confounds.measure_scales(tmp_path, ["digits"], n_pairs=16)  # other settings: measured anew
    assert len(calls) == 2 and len(list(tmp_path.glob("scales-*.json"))) == 2


def test_the_cli_and_a_recomputing_load_measure_the_scales_before_listing_runs(
        tmp_path, monkeypatch, capsys, cache):
    """A fresh store: ``vitplast sweep --study confounds-smoke`` (here only ``--status``) and
    ``ConfoundStudy.load(..., recompute=True)`` (notebook 05's smoke profile) measure the
    scales first, then list the runs from them; reading without recomputing does not."""
    from vitplast.__main__ import main
    from vitplast.experiments import studies, sweep
    from vitplast.measure import empirical, plasticity

    calls = []
    monkeypatch.setattr(empirical, "measure_tasks", lambda *a, **k: calls.append(a) or None)
    monkeypatch.setattr(plasticity, "ranking", lambda rates: pd.DataFrame(dict(
        component=["LN1", "LN2", "FC1"], plasticity=[0.5, 0.5, 1.0])))
    assert main(["sweep", "--study", "confounds-smoke", "--root", str(tmp_path / "cli"),
                 "--status"]) == 0
    assert "all" in capsys.readouterr().out and len(calls) == 1
    assert len(list((tmp_path / "cli").glob("scales-*.json"))) == 1
    monkeypatch.setattr(sweep, "run_sweep", lambda *a, **k: None)
    monkeypatch.setattr(confound_plasticity, "layer_plasticity", lambda *a, **k: pd.DataFrame())
    root = str(tmp_path / "nb")
    with pytest.raises(FileNotFoundError, match="measure_scales"):
        studies.get("confounds-smoke").load(root)
    res = studies.get("confounds-smoke").load(root, recompute=True)
    assert res.extras["scales"]["scales"] == {"LN1": 2.0, "LN2": 2.0} and len(calls) == 2
    assert res.extras["baselines_root"] == str(tmp_path / "cache" / "finetune-smoke")
    assert res.coverage["missing"] == len(confounds.study_runs(studies.get(
        "confounds-smoke").spec, root)) == 5


def test_shipped_confound_results_are_the_complete_study(monkeypatch):
    """The shipped records are exactly the runs of the confound study with its shipped
    scales (read, not re-measured), each finished and started from a new head (validation
    accuracy near chance before the first step), on ladders that put every chosen LR inside;
    its baselines are runs of the main study; the per-layer plasticity and the plasticity
    after finetuning are stored for every block and every run they measure."""
    from vitplast.experiments import studies
    from vitplast.experiments.runs import run_hash
    from vitplast.measure import empirical

    monkeypatch.setattr(empirical, "measure_tasks", lambda *a, **k: pytest.fail("re-measured"))
    shipped = results.records_table(studies.get("confounds").root())
    study = confounds.study_runs(studies.get("confounds").spec)
    expected = {run_hash(c) for c in study}
    assert set(shipped["run"]) == expected and len(shipped) == len(expected)
    assert shipped["status"].isin(["ok", "diverged"]).all()
    assert (shipped["initial_val_acc"] <= 0.3).all()
    main = {run_hash(c) for c in studies.get("main").runs()}
    assert {run_hash(c) for c in studies.get("confounds").baseline_runs()} <= main
    chosen = confound_tables.variant_table(confound_variants.with_variant(shipped))
    settings = confound_variants.with_variant(pd.json_normalize(study))[["task", "variant"]]
    assert len(chosen) == len(settings.drop_duplicates()) and not chosen["lr_at_edge"].any()
    res = studies.get("confounds").load()
    parts = studies.get("confounds").spec.parts
    layer_tasks = [p for p in parts if p.name == "per layer"][0].tasks
    layers = res.extras["layers"]
    blocks = layers[layers["component"].isin(["LN1", "MHA", "FC1"])]
    assert len(blocks.drop_duplicates(["task", "component", "layer"])) == len(layer_tasks) * 3 * 6
    after = studies.get("confounds").spec.after
    measured = res.extras["after"][["task", "variant"]].drop_duplicates()
    assert set(map(tuple, measured.to_numpy())) == {
        (task, config) for task in after.tasks for config in after.configs}


def test_only_settings_with_every_run_stored_are_analysed():
    """A ladder still filling (one of two LRs stored) is left out; a full one is kept."""
    from vitplast.experiments import runs

    expected = runs.grid(["digits"], ["MHA", "LN1"], [0.1, 1.0], [0])
    rows = [dict(task="digits", variant=c, lr=lr, status="ok")
            for c, lr in (("MHA", 0.1), ("LN1", 0.1), ("LN1", 1.0))]
    kept = confounds.complete_settings(pd.DataFrame(rows), expected)
    assert sorted(set(kept["variant"])) == ["LN1"] and len(kept) == 2
