"""Finetuning configurations (``vitplast.train.configurations``): a configuration trains
exactly its parameters and the head, names fail naming the valid ones, exact trainable counts
(notebook 04's table), and the names and their order follow the component table given."""

import pytest
from helpers import tiny_vit

from vitplast.measure import components
from vitplast.measure.components import module_component
from vitplast.train import configurations

#: A row the paper does not have: the attention's output projection alone.
PROJ = module_component("PROJ", "linear", "attn.proj", hidden=1, embedding=None,
                        bound="linear_bound", colour="#117733")


def test_parameter_patterns_and_errors():
    model = tiny_vit()
    assert configurations.trainable_names(model, ["blocks.0.attn.qkv.*"], train_head=False) == [
        "blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.bias"]
    with pytest.raises(ValueError, match="valid: \\['full', 'head', 'LN1'"):
        configurations.trainable_names(model, "attention")
    with pytest.raises(ValueError, match="selects no parameter"):
        configurations.trainable_names(model, ["nothing.*"], train_head=False)


def test_a_configuration_trains_exactly_its_parameters_and_the_head():
    model = tiny_vit()
    names = configurations.trainable_names(model, "LN1")
    assert {components.component_of(n) for n in names} == {"LN1", "head", "norm"}
    total = configurations.set_trainable(model, names)
    assert total == 128 + 32 * 5 + 5 + 2 * 32  # LN1, head, final norm
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == total
    with pytest.raises(ValueError, match="no such parameters"):
        configurations.set_trainable(model, ["blocks.9.norm1.weight"])


def test_the_trainable_table_counts_exactly():
    model = tiny_vit()
    total = sum(p.numel() for p in model.parameters())
    got = configurations.trainable_table(model, ["head", "LN1", ["blocks.0.norm1.*"]])
    head = 32 * 5 + 5 + 2 * 32  # the head and the final norm
    assert got["config"].tolist() == ["head", "LN1", '["blocks.0.norm1.*"]']
    assert got["trainable"].tolist() == [head, head + 128, head + 64]
    assert got["percent"].tolist() == pytest.approx([100 * n / total for n in got["trainable"]])


def test_the_names_and_their_order_follow_the_table():
    assert configurations.PAPER_CONFIGS == ("full", "head", "LN1", "MHA", "LN2", "FC1", "FC2")
    assert list(configurations.CONFIGS) == [
        "full", "head", *components.names(), "embedding"] == list(configurations.configs())
    table = components.extended(PROJ)
    assert list(configurations.configs(table))[-2:] == ["PROJ", "embedding"]
    assert configurations.config_order(table) == (
        "full", "head", "MHA", "FC1", "FC2", "LN2", "LN1", "PROJ")  # after the paper's five
    model = tiny_vit()
    assert configurations.trainable_names(model, "PROJ", train_head=False, table=table) == [
        f"blocks.{i}.attn.proj.{k}" for i in range(2) for k in ("weight", "bias")]
    with pytest.raises(ValueError, match="unknown configuration 'PROJ'; valid: .*'FC2', "
                                         "'embedding'\\]"):
        configurations.trainable_names(model, "PROJ")  # not a configuration of the five
