"""A notebook checks the parameters it receives where it runs (plain papermill included), and
stops at once, naming VITPLAST_DATA, when a shipped store it reads is missing."""

import json
import subprocess
import sys
import time

import pytest

from vitplast import models, weights
from vitplast.course import notebooks, parameters
from vitplast.experiments import archive, studies


def _kinds(name):
    return parameters.declared(notebooks.NOTEBOOK_DIR / f"{name}.ipynb")


def test_text_becomes_the_declared_type_when_it_reads_as_one():
    kinds = _kinds("02_plasticity")
    got = parameters.check("02_plasticity", {
        "tasks": '["digits"]', "scales": "[0.5, 2]", "n_pairs": 64,
        "model_args": '{"img_size": 32}', "source": "fmnist"}, kinds)
    assert got == {"tasks": ["digits"], "scales": [0.5, 2], "n_pairs": 64,
                   "model_args": {"img_size": 32}, "source": "fmnist"}
    got = parameters.check("04_finetuning", {"recompute": "true"}, _kinds("04_finetuning"))
    assert got == {"recompute": True}  # JSON's true as well as Python's True
    assert parameters.check("02_plasticity", {"source": "[1]"}, kinds) == {"source": "[1]"}


@pytest.mark.parametrize("key, value, kind", [
    ("n_pairs", "abc", "int"), ("tasks", "digits", r"list\[str\]"), ("scales", "[1, 'a']",
                                                                      r"list\[float\]"),
    ("model_args", "[1]", "dict"), ("model_args", {1: 2}, "dict"), ("n_pairs", True, "int")])
def test_a_value_of_another_type_is_refused_naming_the_parameter(key, value, kind):
    with pytest.raises(ValueError, match=f"parameter {key} of 02_plasticity takes {kind} "
                       r"\(default .*\); got .*Python or JSON literals"):
        parameters.check("02_plasticity", {key: value}, _kinds("02_plasticity"))


def test_setup_coerces_in_the_notebook_namespace_and_chooses_the_model(tmp_path, monkeypatch):
    ns = {k: v for k, (v, _) in _kinds("02_plasticity").items()}
    ns.update(model_name="test_vit", model_args='{"img_size": 32, "patch_size": 8}',
              tasks='["digits"]')
    spec = parameters.setup("02_plasticity", ns)
    assert ns["tasks"] == ["digits"] and ns["model_args"] == {"img_size": 32, "patch_size": 8}
    assert ns["checkpoints"] == ["final"]  # a timm model has one, as notebooks.plan gives it
    assert spec == weights.ModelSpec("test_vit", None, {"img_size": 32, "patch_size": 8})
    assert models.load_model(spec, pretrained=False).patch_embed.img_size == (32, 32)
    ns.update(tasks=["no_such_task"])
    with pytest.raises(ValueError, match="02_plasticity: tasks: unknown task 'no_such_task'"):
        parameters.setup("02_plasticity", ns)
    ns.update(tasks=["digits"], model_args={})  # the name alone: no spec
    assert parameters.setup("02_plasticity", ns) == "test_vit"
    ns = {k: v for k, (v, _) in _kinds("01_definitions").items()}
    ns.update(model_args={"img_size": 32})  # the embedded model takes none
    with pytest.raises(ValueError, match="model_args was given for 'vitplast_fmnist'"):
        parameters.setup("01_definitions", ns)


def test_reads_name_declared_parameters_and_registered_studies():
    for nb, reads in parameters.READS.items():
        kinds = _kinds(nb)
        for param, which in reads:
            assert param is None or param in kinds, (nb, param)
            name = which.split(".")[0]
            assert name in studies.STUDIES or (name == "study" and "study" in kinds), (nb, which)
    assert parameters.shipped_stores() == list(archive.shipped_stores())


def test_a_missing_shipped_store_stops_setup_with_one_message(tmp_path, monkeypatch):
    monkeypatch.setenv("VITPLAST_DATA", str(tmp_path))
    ns = {k: v for k, (v, _) in _kinds("07_suite").items()}
    with pytest.raises(FileNotFoundError) as err:
        parameters.setup("07_suite", ns)
    message = str(err.value)
    assert "\n" not in message and f"VITPLAST_DATA={tmp_path}" in message
    assert "suite/, suite_length/, gauge/" in message and "-p length_dir FOLDER" in message
    (tmp_path / "suite").mkdir()  # a store of one's own replaces the shipped one
    (tmp_path / "real_vit").mkdir()  # 07's synthesis reads the real model's store too
    ns.update(length_dir=str(tmp_path), gauge_dir=str(tmp_path))
    parameters.setup("07_suite", ns)
    # 04b recomputing a smoke study reads its cache copy, but still the suite and gauge stores;
    # 04 then reads nothing shipped
    missing = parameters.missing_stores("04b_advise", dict(study="main-smoke", recompute=True))
    assert [s.name for _, s in missing] == ["gauge"]
    assert parameters.missing_stores("04_finetuning", dict(study="main-smoke",
                                                           recompute=True)) == []
    missing = parameters.missing_stores("05_confounds", dict(study="confounds", recompute=False))
    assert [(p, s.folder) for p, s in missing] == [("results_dir", "confounds"),
                                                   (None, "finetune")]
    assert parameters.missing_stores("05_confounds", dict(study="confounds-smoke",
                                                          recompute=True)) == []


def _papermill(tmp_path, *params) -> tuple[dict, float]:
    """Plain papermill (its own command line) on notebook 02 cut after its setup cell, with a
    last cell that prints the parameters' types; the executed notebook and the seconds."""
    nb = json.loads((notebooks.NOTEBOOK_DIR / "02_plasticity.ipynb").read_text())
    code = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
    nb["cells"] = nb["cells"][:code[1] + 1] + [dict(
        cell_type="code", metadata={}, outputs=[], execution_count=None, id="probe",
        source="print(repr(tasks), repr(model_args), repr(n_pairs))")]
    (tmp_path / "in.ipynb").write_text(json.dumps(nb))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "papermill", "in.ipynb", "out.ipynb", "-k", "python3",
                    "--no-progress-bar", *params], cwd=tmp_path, capture_output=True, timeout=300)
    seconds = time.perf_counter() - start
    return json.loads((tmp_path / "out.ipynb").read_text()), seconds


def _outputs(nb) -> str:
    return "\n".join(o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
                     for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"]
                     if o.get("output_type") == "stream") + "\n".join(
        f"{o['ename']}: {o['evalue']}" for c in nb["cells"] if c["cell_type"] == "code"
        for o in c["outputs"] if o.get("output_type") == "error")


@pytest.mark.slow
def test_plain_papermill_gets_the_kit_s_coercion_and_messages(tmp_path):
    """``papermill -p tasks '["digits"]'`` passes a string: the setup cell makes it a list;
    ``-p n_pairs abc`` stops in the first code cell, naming the parameter."""
    out, _ = _papermill(tmp_path, "-p", "tasks", '["digits"]', "-p", "model_args", "{}",
                        "-p", "n_pairs", "64")
    assert "['digits'] {} 64" in _outputs(out)
    out, _ = _papermill(tmp_path, "-p", "n_pairs", "abc")
    first = [c for c in out["cells"] if c["cell_type"] == "code"][2]  # after the injected cell
    errors = [o for o in first["outputs"] if o.get("output_type") == "error"]
    assert errors and errors[0]["ename"] == "ValueError"
    assert errors[0]["evalue"].startswith("parameter n_pairs of 02_plasticity takes int")
