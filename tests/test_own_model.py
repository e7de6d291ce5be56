"""Your own model from the command line: notebooks 02-03 on a timm ViT given by name with a
local weights file or a ``local-dir:`` folder, on the embedded tasks (resized to the model's
input) and on the paper datasets (fakes in their on-disk layouts). Offline, in seconds:
timm's ``test_vit`` (3 x 160 x 160, 371K parameters)."""

import pytest
import torch
from helpers import exec_notebook

from vitplast import models
from vitplast.datasets import fake_datasets
from vitplast.inputs import Fitted, native_input
from vitplast.measure import empirical
from vitplast.report import notebooks


@pytest.fixture
def weights(tmp_path, monkeypatch):
    """``test_vit``'s weights as a safetensors file and as a Hugging Face folder; the caches
    and working directory in tmp_path."""
    from safetensors.torch import save_file
    from timm.models._hub import save_for_hf

    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(models, "WEIGHTS_FILES", {})
    source = models.load_model("test_vit", pretrained=False, device="cpu")
    save_file({k: v.contiguous() for k, v in source.state_dict().items()},
              str(tmp_path / "test_vit.safetensors"))
    save_for_hf(source, tmp_path / "hf")
    return tmp_path


def test_embedded_images_are_resized_to_the_model_s_input():
    model = models.load_model("test_vit", pretrained=False, device="cpu")
    task = empirical.load_task_for("digits", model)
    x, label = task.test[0]
    assert isinstance(task.test, Fitted) and x.shape == native_input(model) == (3, 160, 160)
    assert torch.equal(x[0], x[2]) and task.img_size == 160 and task.in_chans == 3
    raw = empirical.load_task_for("digits").test[0][0]  # the embedded format is untouched
    assert raw.shape == (1, 28, 28)
    pixels = (x * 0.5 + 0.5)[0]  # test_vit's mean and std are 0.5
    assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5


def test_a_timm_model_gets_one_checkpoint_unless_told_otherwise():
    (_, params), = notebooks.plan("smoke", ["02"], {"model_name": "test_vit"})
    assert params["checkpoints"] == ["final"]
    with pytest.raises(ValueError, match="drop -p checkpoints"):
        notebooks.plan("smoke", ["02"], {"model_name": "test_vit",
                                         "checkpoints": ["init", "final"]})


@pytest.mark.slow
def test_notebooks_02_03_on_a_timm_model_and_the_embedded_tasks(weights):
    out = exec_notebook("02_plasticity", params=dict(
        model_name="test_vit", weights_file=str(weights / "test_vit.safetensors"), n_pairs=8,
        batch_size=4, scales=[0.5, 2.0]))
    assert set(out["rates"]["task"]) == {"fmnist_contrast", "digits"}
    assert out["mha_scale"]["plasticity"].notna().all()
    out = exec_notebook("03_bounds", params=dict(
        model_name=f"local-dir:{weights / 'hf'}", n_pairs=8, n_lipschitz=2))
    assert out["df"]["bound_holds"].all()


@pytest.mark.slow
def test_notebooks_02_03_on_a_timm_model_and_the_paper_datasets(weights):
    root = fake_datasets.write_all(weights / "paper")
    with fake_datasets.accept_fake_checksums():
        out = exec_notebook("02_plasticity", params=dict(
            model_name="test_vit", weights_file=str(weights / "test_vit.safetensors"),
            tasks=["cifar10", "pet"], pretraining_tasks=[], source="", data_root=str(root),
            n_pairs=8, batch_size=4, scales=[1.0]))
        assert set(out["rates"]["task"]) == {"cifar10", "pet"}
        assert out["mha_scale"]["plasticity"].notna().all()
        out = exec_notebook("03_bounds", params=dict(
            model_name="test_vit", weights_file=str(weights / "test_vit.safetensors"),
            task="cifar10", source="", data_root=str(root), n_pairs=8, n_lipschitz=2))
        assert out["df"]["bound_holds"].all()
