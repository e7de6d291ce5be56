"""The runner: a run's body (a new seeded head, the run's keywords, its ablation looked up in
the preparations it is given) and no clipping kept as no clipping
(``vitplast.experiments.runner``)."""

import pytest
import torch
from helpers import TINY

from vitplast import models
from vitplast.experiments import runner, runs, sweep
from vitplast.experiments.runs import TRAIN_KEYS, run_hash
from vitplast.train import ablations


def test_run_one_passes_the_config_and_seeds_the_new_head(fake_train, monkeypatch):
    config = runs.make_run("digits", "LN2", lr=0.5, seed=3, optimizer="adamw",
                              **{**TINY, "pretrained": True})
    record = runner.run_one(config)
    assert record["status"] == "ok" and record["test_acc"] == 0.25
    model, kwargs = fake_train.calls[0]
    expected = {k: config[k] for k in TRAIN_KEYS if k in config}
    expected["betas"] = (0.9, 0.999)
    assert {k: kwargs[k] for k in expected} == expected
    assert kwargs["device"] == torch.device("cpu") and model.head.out_features == 10
    runner.run_one(config)
    runner.run_one({**config, "seed": 4})
    heads = [m.head.weight for m, _ in fake_train.calls]
    assert torch.equal(heads[0], heads[1]) and not torch.equal(heads[0], heads[2])
    # a new head although the task has as many classes as the pretrained one; norm kept
    pretrained = models.load_model(models.EMBEDDED_NAME, pretrained=True)
    assert pretrained.head.out_features == 10 and not torch.equal(heads[0], pretrained.head.weight)
    assert not torch.allclose(fake_train.calls[0][0].head.bias, pretrained.head.bias)
    assert torch.equal(fake_train.calls[0][0].norm.weight, pretrained.norm.weight)

    marked = {**ablations.PREPARE, "mark": lambda m, c: setattr(m, "mark", c["ablation"])}
    runner.run_one({**config, "prepare": "mark", "ablation": {"c": 3}}, preparations=marked)
    assert fake_train.calls[-1][0].mark == {"c": 3}
    calls = len(fake_train.calls)
    for refuse in (lambda: runner.run_one({**config, "prepare": "nope"}, preparations=marked),
                   lambda: sweep.run_sweep([{**config, "prepare": "nope"}], "unused",
                                           progress=False, preparations=marked)):
        with pytest.raises(ValueError, match="^unknown prepare 'nope'; valid: \\['gauge', "
                                             "'lora', 'mark', .*'rescale_ln'"):
            refuse()  # refused before any work, with one message, not recorded as failed
    with pytest.raises(ValueError, match="^unknown prepare 'mark'"):  # not known by default
        runner.run_one({**config, "prepare": "mark"})
    assert len(fake_train.calls) == calls


def test_no_clipping_means_no_clipping_end_to_end(fake_train):
    """``clip_grad_norm=None`` (or 0) is stored as 0.0 and trains without a clip; a run dict
    made by hand with None reaches the loop as None (no clip), never the default 1.0."""
    config = runs.make_run("digits", lr=0.5, clip_grad_norm=None, **TINY)
    assert config["clip_grad_norm"] == 0.0
    assert run_hash(config) == run_hash(runs.make_run("digits", lr=0.5, clip_grad_norm=0.0,
                                                        **TINY))
    runner.run_one(config)
    runner.run_one({**config, "clip_grad_norm": None})
    assert [kw["clip_grad_norm"] for _, kw in fake_train.calls] == [0.0, None]
