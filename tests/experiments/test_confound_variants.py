"""The confound study's variants as values (``vitplast.experiments.confound_variants``): their
keywords are exactly the dicts the shipped runs were made from (so no run hash moves), a results
table gets their fields from the stored records (never from a name), and tables select them by
fields."""

import pandas as pd
import pytest
from helpers import tiny_vit

from vitplast.experiments import confound_variants, runs
from vitplast.experiments.confound_variants import (
    Variant,
    name_of,
    names_of,
    variant_fields,
    with_variant,
)


def _catalogue():
    return confound_variants.all_variants(tiny_vit(), {"LN1": 4.0, "LN2": 1.55})


def test_keywords_are_the_dicts_the_runs_were_made_from():
    """Written out as ``confound_variants.variants`` wrote them before variants were values, on the
    2-block tiny ViT (d = 32): LN1's count 2 x 64, rank-1 LoRA on FC1 or FC2 2 x 5d (MHA's
    6d is larger), one bias vector of d per block."""
    table = _catalogue()
    old = {
        "LN1 x 4 (preserved)": dict(config="LN1", prepare="rescale_ln", ablation=dict(
            variant="LN1 x 4 (preserved)", component="LN1", c=4.0, preserve=True)),
        "LN2 x 1.55 (raw)": dict(config="LN2", prepare="rescale_ln", ablation=dict(
            variant="LN2 x 1.55 (raw)", component="LN2", c=1.55, preserve=False)),
        "LN1 lr/c^2 (c=4)": dict(config="LN1", lr_scales={"blocks.*.norm1.*": 0.0625},
                                 ablation=dict(variant="LN1 lr/c^2 (c=4)")),
        "LN2 lr/c^2 (c=1.55)": dict(config="LN2", lr_scales={"blocks.*.norm2.*": 1 / 1.55**2},
                                    ablation=dict(variant="LN2 lr/c^2 (c=1.55)")),
        "MHA sparse": dict(config="MHA", prepare="sparse", ablation=dict(
            variant="MHA sparse", component="MHA", count=128)),
        "FC2 sparse": dict(config="FC2", prepare="sparse", ablation=dict(
            variant="FC2 sparse", component="FC2", count=128)),
        "MHA LoRA r1": dict(config=["*.lora_a", "*.lora_b"], prepare="lora", ablation=dict(
            variant="MHA LoRA r1", component="MHA", rank=1, count=320)),
        "FC1 LoRA r1": dict(config=["*.lora_a", "*.lora_b"], prepare="lora", ablation=dict(
            variant="FC1 LoRA r1", component="FC1", rank=1, count=320)),
        "LN2 bias": dict(config=["blocks.*.norm2.bias", "blocks.*.norm2.*.bias"],
                         prepare="sparse", ablation=dict(variant="LN2 bias", component="LN2",
                                                         count=64)),
        "MHA bias": dict(config=["blocks.*.attn.bias", "blocks.*.attn.*.bias"],
                         prepare="sparse", ablation=dict(variant="MHA bias", component="MHA",
                                                         count=64)),
        "LN1 block 0": dict(config=["blocks.0.norm1.*"], ablation=dict(
            variant="LN1 block 0", component="LN1", block=0)),
        "FC1 block 1": dict(config=["blocks.1.mlp.fc1.*"], ablation=dict(
            variant="FC1 block 1", component="FC1", block=1)),
        "full": dict(config="full"), "head": dict(config="head"), "LN2": dict(config="LN2")}
    for name, kw in old.items():
        assert table[name].keywords() == kw, name
        assert runs.run_hash(runs.make_run("digits", lr=0.1, **table[name].keywords())) == \
            runs.run_hash(runs.make_run("digits", lr=0.1, **kw)), name
    assert len(table) == 2 * 3 + 3 * 2 + 5 + 3 * 2 + 7
    assert list(table)[:6] == ["LN1 x 4 (preserved)", "LN1 x 4 (raw)", "LN1 lr/c^2 (c=4)",
                               "LN2 x 1.55 (preserved)", "LN2 x 1.55 (raw)",
                               "LN2 lr/c^2 (c=1.55)"]  # the study's order: its runs' order
    lora = table["FC1 LoRA r1"]
    assert (lora.family, lora.component, lora.rank, lora.count, lora.c) == ("lora", "FC1", 1,
                                                                            320, None)
    lora.keywords()["config"].append("*")  # a new dict each call: the variant is unchanged
    assert lora.keywords()["config"] == ["*.lora_a", "*.lora_b"]
    with pytest.raises(ValueError, match="unknown family 'sparsest'; valid: \\['plain'"):
        Variant("x", "sparsest", "MHA")


def _records(table, **fixed) -> pd.DataFrame:
    """Run configs of ``table``'s variants on digits, as ``results`` reads records."""
    return pd.json_normalize(runs.grid(["digits"], [v.keywords() for v in table.values()],
                                       [0.1], [0], **fixed))


def test_with_variant_reads_the_fields_from_the_records():
    """Every field column equals the variant's field; the lr/c^2 control's component and c come
    from its lr_scales, even where its stored name says otherwise; recipe changes suffix the
    display name and stay in their own columns."""
    table = _catalogue()
    df = with_variant(_records(table))
    assert df["variant"].tolist() == list(table)
    for row, variant in zip(df.itertuples(), table.values()):
        got = (row.family, row.component, row.c, row.preserve, row.count, row.rank, row.block)
        want = (variant.family, variant.component, variant.c, variant.preserve, variant.count,
                variant.rank, variant.block)
        assert [None if pd.isna(g) else g for g in got] == pytest.approx(
            [w for w in want]), variant.name
    control = df.set_index("variant").loc["LN2 lr/c^2 (c=1.55)"]
    assert control["c"] == pytest.approx(1.55, rel=1e-12) and control["component"] == "LN2"
    misnamed = _records({"x": table["LN2 lr/c^2 (c=1.55)"]})
    misnamed["ablation.variant"] = "LN1 lr/c^2 (c=9)"  # a name that would mislead a parser
    fields = with_variant(misnamed).iloc[0]
    assert (fields["family"], fields["component"]) == ("lr/c^2", "LN2")
    assert fields["c"] == pytest.approx(1.55, rel=1e-12)
    recipe = with_variant(_records({k: table[k] for k in ("MHA", "LN1 block 0")},
                                   optimizer="adamw", checkpoint="init"))
    assert recipe["variant"].tolist() == ["MHA (AdamW) (init)", "LN1 block 0 (AdamW) (init)"]
    assert recipe[["family", "component", "optimizer", "checkpoint"]].values.tolist() == [
        ["plain", "MHA", "adamw", "init"], ["block", "LN1", "adamw", "init"]]
    assert recipe["block"].tolist()[1] == 0


def test_tables_select_variants_by_fields():
    """``names_of`` / ``name_of`` find variants by fields, c within a relative tolerance;
    a recipe change is left out unless asked for; the catalogue fills what has no runs."""
    table = _catalogue()
    runs_df = pd.concat([with_variant(_records({"MHA": table["MHA"]})),
                         with_variant(_records({"MHA": table["MHA"]}, optimizer="adamw"))])
    fields = variant_fields(runs_df, table)
    assert len(fields) == len(table) + 1 and fields.at["MHA (AdamW)", "optimizer"] == "adamw"
    assert name_of(fields, family="sparse", component="MHA") == "MHA sparse"
    assert name_of(fields, family="plain", component="MHA") == "MHA"
    assert name_of(fields, family="plain", component="MHA", optimizer="adamw") == "MHA (AdamW)"
    assert name_of(fields, family="lr/c^2", component="LN2", c=1.55 * (1 + 1e-9)) == \
        "LN2 lr/c^2 (c=1.55)"
    assert name_of(fields, family="lr/c^2", component="LN2", c=1.56) is None
    assert names_of(fields, family="block", component=["LN1", "MHA"]) == [
        "LN1 block 0", "LN1 block 1", "MHA block 0", "MHA block 1"]
    assert names_of(fields, family="rescale", preserve=True) == ["LN1 x 4 (preserved)",
                                                                 "LN2 x 1.55 (preserved)"]
    with pytest.raises(ValueError, match="matches several variants"):
        name_of(fields, family="sparse")
    with pytest.raises(ValueError, match="'colour' is not a column"):
        names_of(fields, colour="red")
