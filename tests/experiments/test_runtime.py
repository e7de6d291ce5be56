"""How a study runs: the runtime settings, each checked; the executor; which runs a sweep
takes (order, setting shards, limit)."""

import argparse
import dataclasses

import pytest

from vitplast.experiments import runs, runtime
from vitplast.experiments.runs import setting
from vitplast.experiments.runtime import (
    PRECISIONS,
    Executor,
    Flag,
    Runtime,
    add_arguments,
    parse_shard,
)
from vitplast.experiments.store import Store, select
from vitplast.train import keys

TINY = dict(steps=2, warmup_steps=1, eval_every=1, batch_size=8)


def test_select_orders_shards_and_limits(tmp_path):
    """seed-first puts every seed's runs before the next seed's, in their order; shards are
    disjoint and cover the study, a setting's LRs in one shard; the limit counts only runs the
    store lacks."""
    study = runs.grid(["digits"], ["head", "LN1"], [0.1, 1.0], [42, 0], **TINY)
    ordered = select(study, tmp_path)
    assert [r["seed"] for r in ordered] == [42] * 4 + [0] * 4
    assert [r for r in ordered if r["seed"] == 0] == [r for r in study if r["seed"] == 0]
    assert select(study, tmp_path, order="grid") == study
    halves = [select(study, tmp_path, shard=s) for s in ("0/2", "1/2")]
    settings = list(dict.fromkeys(map(setting, ordered)))  # (config, seed): a run but its LR
    assert len(settings) == 4 and halves == [
        [r for r in ordered if setting(r) in settings[i::2]] for i in (0, 1)]
    assert select(study, shard=(1, 2)) == halves[1]
    Store(tmp_path).save(ordered[0], dict(status="diverged"))
    assert select(study, tmp_path, limit=2) == ordered[1:3]
    for bad, match in [(dict(order="random"), "valid: \\['seed-first', 'grid'\\]"),
                       (dict(shard="2/2"), "0 <= I < N"), (dict(shard="half"), "I/N"),
                       (dict(shard=(0, 0)), "0 <= I < N"), (dict(shard=(1,)), "I/N"),
                       (dict(limit=0), "N >= 1")]:
        with pytest.raises(ValueError, match=match):
            select(study, tmp_path, **bad)
    with pytest.raises(ValueError, match="limit needs root"):
        select(study, limit=1)


def test_a_runtime_refuses_bad_settings_naming_the_valid_ones():
    assert Runtime(shard="1/3").shard == (1, 3) == parse_shard((1, 3))
    assert Runtime(shard=(1, 3)).shard == (1, 3)  # the parsed form is taken back as it is
    assert dataclasses.replace(Runtime(shard="1/3"), limit=2) == Runtime(shard=(1, 3), limit=2)
    for bad, match in [(dict(order="random"), "valid: \\['seed-first', 'grid'\\]"),
                       (dict(precision="fp8"), f"valid: {list(PRECISIONS)}".replace("[", "\\[")
                        .replace("]", "\\]")),
                       (dict(limit=0), "N >= 1"), (dict(shard="2/2"), "0 <= I < N")]:
        with pytest.raises(ValueError, match=match):
            Runtime(**bad)
    assert Runtime(workers=2, eval_every=5, limit=3).given() == ["workers", "eval_every",
                                                                 "limit"]
    assert Runtime(workers=2, eval_every=5, limit=3).run_keys() == dict(workers=2, eval_every=5)
    with pytest.raises(ValueError, match="valid: \\['serial', 'submitit'\\]"):
        Executor("slurm")
    with pytest.raises(TypeError, match="serial executor takes no options"):
        Executor("serial", dict(timeout_min=5))
    with pytest.raises(ValueError, match="unknown cluster 'slurn'"):
        Executor("submitit", dict(cluster="slurn"))


def test_a_setting_is_a_run_without_its_lr():
    a, b = runs.make_run("digits", "LN1", lr=0.1), runs.make_run("digits", "LN1", lr=0.3)
    assert setting(a) == setting(b) != setting(runs.make_run("digits", "LN2", lr=0.1))
    assert setting(a) == setting({**a, "workers": 3})  # runtime keys are not hashed
    assert setting(a) != setting({**a, "eval_every": 5})  # eval_every is


def test_a_float_flag_is_parsed_checked_and_declared_as_a_number(monkeypatch):
    """A ``float`` flag: the CLI parses a finite number >= its minimum, ``Flag.check`` (what
    ``Runtime`` calls) refuses another type, a non-finite number or one below it; as a run key
    (a row of ``keys.KEYS``, its flag made by ``key_flag``) its schema property is a number
    with that minimum."""
    flag = Flag("lr_floor", float, "the least LR", minimum=0.0)
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser, (flag,))
    assert parser.parse_args(["--lr-floor", "1e-4"]).lr_floor == 1e-4
    assert parser.parse_args(["--lr-floor", "0"]).lr_floor == 0.0
    assert parser.parse_args([]).lr_floor is None
    for bad in ("-0.5", "nan", "inf", "x"):
        with pytest.raises(argparse.ArgumentError, match="lr-floor"):
            parser.parse_args(["--lr-floor", bad])
    assert flag.check(0.5) == 0.5 and flag.check(1) == 1 and flag.check(None) is None
    for bad, match in [(-0.5, "N >= 0.0"), (float("nan"), "a finite number"),
                       (True, "a finite number"), ("0.5", "a finite number")]:
        with pytest.raises(ValueError, match=f"lr_floor takes {match}"):
            flag.check(bad)
    with pytest.raises(TypeError, match="type takes one of"):
        Flag("lr_floor", list, "")
    key = keys.Key("lr_floor", float, None, "the least LR", hashed=False, nullable=True,
                   minimum=0.0)
    monkeypatch.setattr(runtime, "KEY", {**keys.KEY, "lr_floor": key})
    as_key = runtime.key_flag("lr_floor", "the least LR")
    assert (as_key.type, as_key.minimum, as_key.run) == (float, 0.0, "key")
    assert key.property() == {"type": ["number", "null"], "minimum": 0.0,
                              "description": "the least LR"}
