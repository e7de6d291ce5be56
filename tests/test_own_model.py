"""Your own model from the command line: notebooks 02-03 on a timm ViT given by name with a
local weights file or a ``local-dir:`` folder, on the embedded tasks (resized to the model's
input) and on the paper datasets (fakes in their on-disk layouts). Offline, in seconds:
timm's ``test_vit`` (3 x 160 x 160, 371K parameters), and a 32 px / patch-4 ViT of one's own
(timm's ``vit_tiny`` architecture, 2 blocks) given with ``model_args``."""

import json

import pytest
import torch
from helpers import exec_notebook
from safetensors.torch import save_file

from vitplast import models
from vitplast.__main__ import main
from vitplast.course import notebooks
from vitplast.datasets import fake_datasets
from vitplast.experiments import advise
from vitplast.inputs import Fitted, native_input
from vitplast.measure import empirical


@pytest.fixture
def weights(tmp_path, monkeypatch):
    """``test_vit``'s weights as a safetensors file and as a Hugging Face folder; the caches
    and working directory in tmp_path."""
    from safetensors.torch import save_file
    from timm.models._hub import save_for_hf

    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
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


#: A 32 px, patch-4, 10-class ViT of one's own: timm's vit_tiny architecture with 2 blocks.
TINY32 = dict(img_size=32, patch_size=4, num_classes=10, depth=2)


@pytest.fixture
def tiny32(tmp_path, monkeypatch):
    """Random weights of ``TINY32`` saved to safetensors; caches and working directory in
    tmp_path."""
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    source = models.load_model("vit_tiny_patch16_224", pretrained=False, device="cpu", **TINY32)
    path = tmp_path / "tiny32.safetensors"
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(path))
    return source, path


def test_advise_ranks_the_components_of_one_s_own_model(tiny32):
    """``advise.rank`` takes the model as the notebooks do (name, weights file, model_args):
    the task's 28 px grayscale images are fitted to its 32 px RGB input."""
    source, path = tiny32
    ranked = advise.rank("vit_tiny_patch16_224", "digits", weights_file=str(path),
                         model_args=TINY32, n_pairs=8, batch_size=4, steps=1)
    assert set(ranked["rule"]) == set(advise.RULES) and len(ranked) == 5 * len(advise.RULES)
    for _, g in ranked.groupby("rule"):
        assert sorted(g["rank"]) == [1, 2, 3, 4, 5] and g["score"].notna().all()
    with pytest.raises(ValueError, match="another patch size.*patch_size=4"):
        advise.rank("vit_tiny_patch16_224", "digits", weights_file=str(path),
                    model_args=dict(depth=2, num_classes=10), rules=["paper: MHA"])


@pytest.mark.slow
def test_notebooks_02_03_on_one_s_own_model_from_the_cli(tiny32, capsys):
    """The own-model page's command line: smoke profile, the weights file and ``model_args``."""
    _, path = tiny32
    code = main(["notebooks", "run", "--profile", "smoke", "--only", "02", "03", "--out", "run",
                 "-p", "model_name", "vit_tiny_patch16_224", "-p", "weights_file", str(path),
                 "-p", "model_args", json.dumps(TINY32)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "02_plasticity     ok" in out and "03_bounds     ok" in out


def test_the_own_model_page_s_command_line_is_valid():
    """The own-model page's CLI line (docs/own-model.md): its notebooks, parameters, types."""
    import shlex
    from pathlib import Path

    from vitplast.cli_notebooks import literal

    text = (Path(__file__).resolve().parents[1] / "docs" / "own-model.md").read_text().replace(
        "\\\n", "")
    line, = [x for x in text.splitlines() if "model_args" in x and x.startswith("vitplast ")]
    args = shlex.split(line)
    params = {args[i + 1]: literal(args[i + 2]) for i, a in enumerate(args) if a == "-p"}
    only = args[args.index("--only") + 1:args.index("-p")]
    planned = dict(notebooks.plan("smoke", only, params))
    assert list(planned) == ["02_plasticity", "03_bounds"]
    assert planned["02_plasticity"]["model_args"] == dict(img_size=32, patch_size=4, num_classes=10)
