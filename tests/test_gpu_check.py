"""The device check (benchmarks/gpu_check.py) is ready where no GPU is: its RESULT lines and
exit code, the SKIP without CUDA, and the whole path rehearsed on the CPU (``--dry``)."""

import importlib.util
import re
from pathlib import Path

import pytest
import torch

from vitplast.course import notebooks

LINE = re.compile(r"^RESULT (\S+) (\S+) target (<=|>=|==) (\S+)( \(dry: not enforced\))?$")


@pytest.fixture(scope="module")
def gpu_check():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_result_lines_name_every_target_and_fail_on_a_miss(gpu_check):
    values = {"gpu_plasticity_overhead_ratio": 1.1, "gpu_finetune_step_overhead_ratio": 1.05,
              "gpu_batched_runs_per_minute_ratio": 8.5,
              "notebooks_ok": len(notebooks.NOTEBOOKS), "gpu_check_seconds": 300.0}
    lines, code = gpu_check.result_lines(values)
    assert code == 0 and [LINE.match(line).group(1) for line in lines] == list(gpu_check.TARGETS)
    assert lines[0] == "RESULT gpu_plasticity_overhead_ratio 1.100 target <= 1.2"
    _, code = gpu_check.result_lines({**values, "notebooks_ok": len(notebooks.NOTEBOOKS) - 1})
    assert code == 1
    _, code = gpu_check.result_lines({**values, "notebooks_ok": 1}, notebooks_run=1)
    assert code == 0
    _, code = gpu_check.result_lines({**values, "gpu_batched_runs_per_minute_ratio": 7.9})
    assert code == 1
    lines, code = gpu_check.result_lines({**values, "gpu_check_seconds": 600.0}, dry=True)
    assert code == 0 and lines[-1].endswith("(dry: not enforced)")


def test_without_cuda_it_skips(gpu_check, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 0
    assert capsys.readouterr().out.startswith("SKIP gpu_check: no CUDA device")


@pytest.mark.slow
def test_the_dry_run_takes_the_whole_path_on_the_cpu(gpu_check, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "cache"))
    assert gpu_check.main(["--dry", "--pairs", "64", "--steps", "2", "--only", "01",
                           "--out", str(tmp_path / "nb")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    results = [LINE.match(line) for line in out[-len(gpu_check.TARGETS):]]
    assert all(results), out[-6:]
    assert {m.group(1): m.group(2) for m in results}["notebooks_ok"] == "1"
    assert (tmp_path / "nb" / "01_definitions.ipynb").exists()
