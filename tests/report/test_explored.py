"""The explorers' measurements kept beside a study (``vitplast.report.explored``): the same
values as measuring them, read back without measuring, measured again for another key; and
notebook 06's views of the embedded model are shipped for its default and smoke profiles."""

import pytest
from helpers import tiny_vit

from vitplast import cached
from vitplast.report import explored, widgets


@pytest.fixture
def pairs():
    import torch

    torch.manual_seed(0)
    return torch.randn(6, 1, 16, 16), torch.randn(6, 1, 16, 16)


def test_measured_and_rescaled_are_kept_with_a_key_and_read_back_exactly(tmp_path, pairs):
    import torch

    model = tiny_vit()
    x, y = pairs
    calls = []

    def get():
        calls.append(1)
        return model, x, y

    fresh = explored.measured(get, protocol="hidden")
    kept = explored.measured(get, key=dict(m="tiny"), root=tmp_path, protocol="hidden")
    again = explored.measured(get, key=dict(m="tiny"), root=tmp_path, protocol="hidden")
    assert len(calls) == 2  # the third is read
    for rates, bound in (kept, again):
        assert rates["rate"].equals(fresh[0]["rate"]) and bound == fresh[1]
    explored.measured(get, key=dict(m="other"), root=tmp_path, protocol="hidden")
    assert len(calls) == 3 and len(list(tmp_path.glob("table-*.npz"))) == 2

    images = torch.cat([x, y])
    logits = torch.no_grad()(lambda m: m(images))
    made = lambda: (model, x, y, logits, logits(model))  # noqa: E731
    fresh = explored.rescaled(made, "LN1", 2.0)
    kept = explored.rescaled(made, "LN1", 2.0, key=dict(m="tiny"), root=tmp_path)
    assert kept == fresh and set(fresh["plasticity"]) == set(range(len(model.blocks)))
    assert explored.rescaled(lambda: 1 / 0, "LN1", 2.0, key=dict(m="tiny"),
                             root=tmp_path) == fresh  # read, not measured
    assert explored.kept_key(model, "final") is None and explored.kept_key(None, "random") is None


def test_notebook_06_opens_its_explorers_on_views_kept_in_data(monkeypatch):
    """The views notebook 06 measures in its default and smoke profiles (the plasticity
    explorer's first view, the LayerNorm explorer at c = 1 and at each of ``scales``) are read
    from data/finetune, not measured."""
    from vitplast.course import notebooks
    from vitplast.course.parameters import kept_folder

    def computed(*args, **kwargs):
        raise AssertionError("not stored: the notebook would measure it on a fresh clone")

    monkeypatch.setattr(cached, "_computed", computed)
    for profile in ("default", "smoke"):
        p = {**notebooks.notebook_parameters("06_explorer"),
             **notebooks.PROFILES[profile].get("06_explorer", {})}
        kept = kept_folder(p["measured_dir"])
        where = dict(checkpoint=p["checkpoint"] or None, task=p["task"], source=p["source"],
                     n_pairs=p["n_pairs"], root=kept)
        view = widgets.plasticity_explorer(**where)
        assert len(widgets.bound_table(view))
        gamma = widgets.gamma_explorer(**where)
        gamma.controls["c"].value = 2.0
        assert len(widgets.gamma_table(gamma, p["scales"])) == len(p["scales"])
