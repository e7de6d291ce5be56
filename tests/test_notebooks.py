"""The notebook sequence: committed clean, parameters declared, smoke runs with papermill."""

import json

import pytest

from vitplast import notebooks
from vitplast.__main__ import main


@pytest.mark.parametrize("name", notebooks.available())
def test_notebook_source_is_clean_and_parametrised(name):
    nb = json.loads((notebooks.NOTEBOOK_DIR / f"{name}.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") and not c.get("execution_count") for c in code)
    params = notebooks.notebook_parameters(name)
    assert params, "a parameters cell with at least one parameter"
    for profile in notebooks.PROFILES:  # every profile override is a declared parameter
        assert set(notebooks.PROFILES[profile].get(name, {})) <= set(params)
    first = "".join(nb["cells"][0]["source"])
    assert first.startswith(f"# {name[:2]} ·") and "What this shows" in json.dumps(nb)


@pytest.mark.slow
@pytest.mark.parametrize("name", notebooks.available())
def test_notebook_runs_in_the_smoke_profile(name, tmp_path):
    summary = notebooks.run("smoke", only=[name[:2]], out_dir=tmp_path, progress=False)
    assert summary.status.tolist() == ["ok"], summary.error.tolist()
    assert (tmp_path / f"{name}.ipynb").exists()


def test_plan_rejects_unknown_names_before_running():
    with pytest.raises(ValueError, match="valid: \\['smoke', 'default', 'paper'\\]"):
        notebooks.plan("fast")
    with pytest.raises(ValueError, match="unknown notebook"):
        notebooks.plan("smoke", only=["99"])
    with pytest.raises(ValueError, match="unknown parameter"):
        notebooks.plan("smoke", params={"n_pair": 3})
    (name, params), = notebooks.plan("smoke", only=["01"], params={"n_pairs": 7})
    assert name == "01_definitions" and params["n_pairs"] == 7


def test_cli_errors_exit_before_any_kernel(capsys):
    with pytest.raises(SystemExit) as err:
        main(["notebooks", "run", "--profile", "fast"])
    assert err.value.code == 2 and "valid: ['smoke'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["notebooks", "run", "-p", "no_such_param", "1"])


def test_notebook_defaults_are_the_shipped_studies():
    from vitplast import confounds

    assert notebooks.notebook_parameters("04_finetuning")["study"] == "main"
    params = notebooks.notebook_parameters("05_confounds")
    for key, value in confounds.EMBEDDED_STUDY.items():
        assert params[key] == value, key


def test_paper_profile_fails_early_without_gpu_or_data(monkeypatch, tmp_path):
    import torch

    todo = notebooks.plan("paper", only=["03"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        notebooks.check_requirements("paper", todo)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(FileNotFoundError, match="data_root"):
        notebooks.check_requirements("paper", [(n, {**p, "data_root": str(tmp_path / "no")})
                                               for n, p in todo])
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        notebooks.check_requirements("paper", [(n, {**p, "data_root": str(tmp_path)})
                                               for n, p in todo])
