"""The real-model measurements (``vitplast.measure.real``) on a tiny random DINOv2-shaped ViT:
every table's shape, relative plasticity = plasticity x s_in / s_out, the bounds above the
observed lower end, the stored check pairs re-measured exactly, the store round trip."""

import numpy as np
import pandas as pd
import pytest
from helpers import tiny_dinov2

from vitplast import files, models
from vitplast.measure import fingerprint, intervals, plasticity, real, relative
from vitplast.measure.pairs import make_pairs


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(models, "load_model", lambda *a, **k: tiny_dinov2())
    monkeypatch.setattr(real, "CHECK_PAIRS", 3)
    return real.measure_model("tiny", n_pairs=6, batch_size=3, n_lipschitz=2, power_iters=3,
                              stream_images=4, progress=False)


def test_tables_cover_every_block_component_protocol_and_source(tiny):
    layers = tiny["layers"]
    assert len(layers) == 2 * 2 * 2 * 5  # sources x protocols x blocks x components
    assert set(layers["source"]) == set(real.SOURCES)
    assert set(tiny["stream"]["source"]) == set(real.SOURCES) and len(tiny["stream"]) == 4
    assert list(tiny["gauge"]["layer"]) == [0, 1]
    np.testing.assert_allclose(tiny["gauge"]["ls1_gamma"], 0.5)  # init_values, untouched
    assert len(tiny["check"]) == 2 * 3 * 2 * 5  # sources x pairs x blocks x components


def test_relative_is_plasticity_times_scale_ratio_and_bounds_hold(tiny):
    layers = tiny["layers"]
    np.testing.assert_allclose(layers["relative_plasticity"],
                               layers["plasticity"] * layers["s_in"] / layers["s_out"],
                               rtol=1e-5)
    assert layers["bound_holds"].astype(bool).all()
    assert (layers["plasticity"] <= layers["max_rate"] * (1 + 1e-6)).all()


def test_one_pass_gives_the_intervals_and_relative_tables_of_their_own_passes(tiny):
    """``layers`` reads ``intervals`` and ``relative`` from one pass per protocol: the numbers
    of each measured by its own pass."""
    model = tiny_dinov2()
    pairs = make_pairs(real.source_images(model, "photos", 12), n_pairs=6, seed=0)
    for protocol in ("hidden", "embedding"):
        got = tiny["layers"].query("source == 'photos' and protocol == @protocol")
        iv = intervals.intervals(model, pairs, protocol=protocol, n_lipschitz=2, power_iters=3,
                                 batch_size=3, progress=False)
        rel = relative.measure(model, pairs, protocol=protocol, batch_size=3)
        for own, columns in ((iv, ["plasticity", "max_rate", "bound", "local_lipschitz"]),
                             (rel, ["s_in", "s_out", "relative_plasticity"])):
            np.testing.assert_array_equal(got[columns].to_numpy(), own[columns].to_numpy())


def test_check_pairs_are_the_first_pairs_measured_directly(tiny):
    model = tiny_dinov2()
    images = real.source_images(model, "photos", 12)
    pairs = make_pairs(images, n_pairs=6, seed=0)
    x, y = pairs.tensors(3)
    direct = plasticity.measure(model, x, y, protocol="embedding", progress=False)
    stored = tiny["check"][tiny["check"]["source"] == "photos"]
    np.testing.assert_allclose(stored["rate"].to_numpy(), direct["rate"].to_numpy(), rtol=1e-5)


def test_recheck_remeasures_the_stored_pairs(tiny, monkeypatch):
    check = real.recheck(tiny["check"], n_pairs=6)
    assert len(check) == len(tiny["check"])
    assert check["rel_diff"].max() < 1e-5
    broken = tiny["check"].assign(rate=tiny["check"]["rate"] * 1.01)
    assert real.recheck(broken, n_pairs=6)["rel_diff"].min() > 5e-3  # a changed rate is seen


def test_write_read_round_trip_and_missing_store(tiny, tmp_path):
    tasks = pd.DataFrame([dict(task="digits", protocol="hidden", component="MHA",
                               plasticity=1.0, relative_plasticity=1.0)])
    meta = dict(model="tiny", n_pairs=6)
    real.write(dict(tiny, tasks=tasks), tmp_path, meta)
    back = real.read(tmp_path)
    assert back["meta"] == dict(meta, measuring=fingerprint.measuring())  # stamped by write
    pd.testing.assert_frame_equal(back["gauge"], tiny["gauge"])
    assert "ln1_plugin" in back["stream"] and "ln1_bound" not in back["stream"]  # as shown
    files.write_json(tmp_path / real.FOLDER / "meta.json", dict(meta, measuring="m0-other"))
    with pytest.warns(UserWarning, match="other measuring code"):
        real.read(tmp_path)
    with pytest.raises(FileNotFoundError, match="vitplast weights measure"):
        real.read(tmp_path / "none")


def test_unknown_source_names_the_valid_ones():
    with pytest.raises(ValueError, match="photos"):
        real.source_images(tiny_dinov2(), "imagenet", 2)


def test_task_plasticity_means_over_blocks(monkeypatch):
    monkeypatch.setattr(models, "load_model", lambda *a, **k: tiny_dinov2())
    t = real.task_plasticity("tiny", ["digits"], img_size=28, n_pairs=4, batch_size=4)
    assert len(t) == 2 * 5 and set(t["protocol"]) == {"hidden", "embedding"}
    assert (t["plasticity"] > 0).all() and (t["relative_plasticity"] > 0).all()
