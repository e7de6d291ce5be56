"""Every benchmark runs, always: each script in ``benchmarks/`` has a quick mode (tiny settings,
the same code path) that a test runs as a subprocess, checking its ``RESULT`` lines against the
form the table below declares and its exit code against the comparisons it printed. A script
missing from the table fails ``test_every_benchmark_has_a_quick_mode``.

``RESULT <name> <value> target <op> <target>`` (or ``RESULT <name> <value>``, a figure with no
target; ``(dry: not enforced)`` after the target: a rehearsal that exits 0 whatever it measured).
"""

import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
LINE = re.compile(r"^RESULT (\w+) (-?[\d.]+)(?: target (<=|>=|==) (-?[\d.]+)"
                  r"( \(dry: not enforced\))?)?$")
OPS = {"<=": float.__le__, ">=": float.__ge__, "==": float.__eq__}


@dataclass(frozen=True)
class Quick:
    """How a benchmark's quick mode is run and what it prints.

    Attributes:
        args: the script's arguments in its quick mode (as ``run_by`` passes them).
        results: (name, op, target) of every RESULT line, in order (op and target ``None`` for
            a figure with no target): the quick mode keeps the full run's targets.
        meets: the quick measurement must meet its targets (exit 0); otherwise the exit code
            only has to agree with the printed comparisons (timings at toy sizes miss or meet
            their targets as the machine's load decides).
        slow: over ~20 s (``@pytest.mark.slow``).
        run_by: ``path::test`` of the test elsewhere that runs the quick mode (this module
            then only checks that the test exists, its module names the script and the test
            passes ``args``).
    """

    args: tuple[str, ...]
    results: tuple[tuple[str, str | None, float | None], ...]
    meets: bool = False
    slow: bool = False
    run_by: str = ""


#: Every script in ``benchmarks/`` -> its quick mode.
QUICK = {
    "batched_runs.py": Quick(("--quick",), (("batched_runs_ratio_cpu_mix", ">=", 0.9),)),
    "finetune_step.py": Quick(("--quick",), (("finetune_step_overhead_ratio", "<=", 1.05),)),
    "gpu_check.py": Quick(
        ("--dry", "--pairs", "64", "--steps", "2", "--only", "01"),
        (("gpu_plasticity_overhead_ratio", "<=", 1.2),
         ("gpu_finetune_step_overhead_ratio", "<=", 1.1),
         ("gpu_batched_runs_per_minute_ratio", ">=", 8.0), ("notebooks_ok", "==", 1),
         ("gpu_check_seconds", "<=", 480.0)), slow=True,
        run_by="tests/test_gpu_check.py::test_the_dry_run_takes_the_whole_path_on_the_cpu"),
    "notebook_times.py": Quick(("--quick",), (("smoke_cpu_seconds", None, None),
                                              ("smoke_run_seconds", "<=", 60.0)), slow=True),
    # 50 vs 1,000 pairs: at toy sizes the peak moves with the allocator (0.92 once, 1.16 in a
    # loaded suite), so the exit code only has to agree; the full run holds the target
    "plasticity_memory.py": Quick(
        ("--quick",), (("plasticity_peak_memory_ratio_20k_vs_1k", "<=", 1.1),), slow=True),
    "plasticity_overhead.py": Quick(("--quick",), (("plasticity_floor_ratio_w128", "<=", 1.05),
                                                   ("plasticity_floor_ratio_w768", "<=", 1.05))),
    # the real ViT (or, without its weights, a random one of its size): at 56 px and 4 pairs
    # the estimator's fixed costs decide, so only the exit code has to agree (224 px holds it)
    "real_vit_plasticity.py": Quick(("--quick",), (("real_vit_plasticity_ratio_hidden", "<=", 1.2),
                                                   ("real_vit_plasticity_ratio_embedding", "<=",
                                                    1.2))),
    "real_vit_sizing.py": Quick(("--quick",), (("real_paper_study_cpu_seconds", None, None),
                                               ("real_paper_study_gpu_seconds", None, None),
                                               ("real_study_seconds", "<=", 10800.0)), slow=True),
    "real_vit_step.py": Quick(("--quick",), (("real_vit_step_overhead_ratio", "<=", 1.1),),
                              slow=True),
    # a Slurm is needed (the test's ``slurm`` fixture): the smoke study's first 6 runs, where
    # the jobs' start-up is most of the time
    "slurm_throughput.py": Quick(
        ("--quick",), (("slurm_throughput_ratio_smoke", ">=", 0.8),), slow=True,
        run_by="tests/experiments/test_slurm.py::"
               "test_the_throughput_benchmark_runs_in_its_quick_mode"),
    # its --quick settings (QUICK in the script), spelled out, with a tighter target
    "vitb_dry_run.py": Quick(
        ("--datasets", "cifar10c_snow,domainnet_sketch", "--pairs", "2", "--steps", "1",
         "--batch-size", "2", "--target", "600"), (("vitb_dry_run_seconds", "<=", 600.0),),
        slow=True,
        run_by="tests/datasets/test_paper_datasets.py::"
               "test_vitb_dry_run_at_full_size_on_fake_files"),
}


def check_output(out: str, code: int, quick: Quick) -> None:
    """Raise AssertionError unless ``out`` ends with RESULT lines of ``quick.results``' form and
    ``code`` is 0 exactly when every enforced target is met (and when ``quick.meets``)."""
    lines = [line for line in out.strip().splitlines() if line.startswith("RESULT ")]
    assert lines and out.strip().splitlines()[-1] == lines[-1], f"no RESULT last line:\n{out}"
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), [line for line, m in zip(lines, parsed) if not m]
    declared = [(m[1], m[3], None if m[4] is None else float(m[4])) for m in parsed]
    assert declared == list(quick.results), out
    met, close = True, False
    for m in parsed:
        if m[3] is None or m[5]:  # a figure with no target, or a rehearsal's
            continue
        value, target = float(m[2]), float(m[4])
        met &= OPS[m[3]](value, target)
        # the script compares before rounding to the printed digits: at the target, either exit
        decimals = len(m[2].partition(".")[2])
        close |= bool(decimals) and abs(value - target) <= 0.5 * 10 ** -decimals
    assert not quick.meets or met, f"the quick mode missed its target:\n{out}"
    assert close or (code == 0) == met, f"exit {code}, targets met: {met}:\n{out}"


def test_every_benchmark_has_a_quick_mode():
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == sorted(QUICK)


@pytest.mark.parametrize("script", [s for s, q in QUICK.items() if q.run_by])
def test_the_test_running_a_quick_mode_elsewhere_exists(script):
    path, name = QUICK[script].run_by.split("::")
    text = (ROOT / path).read_text()
    test, = [f for f in ast.walk(ast.parse(text)) if isinstance(f, ast.FunctionDef)
             and f.name == name and f.name.startswith("test_")]
    assert re.search(rf"benchmarks\W+{re.escape(script)}", text)  # "benchmarks" / "x.py" too
    strings = {c.value for c in ast.walk(test) if isinstance(c, ast.Constant)}
    assert set(QUICK[script].args) <= strings, set(QUICK[script].args) - strings


def test_the_check_fails_when_the_exit_disagrees_with_the_printed_comparison():
    quick = Quick(("--quick",), (("a_ratio", "<=", 1.05), ("b_seconds", None, None)))
    check_output("x\nRESULT a_ratio 1.010 target <= 1.05\nRESULT b_seconds 3.5\n", 0, quick)
    check_output("RESULT a_ratio 1.200 target <= 1.05\nRESULT b_seconds 3.5", 1, quick)
    check_output("RESULT a_ratio 1.050 target <= 1.05\nRESULT b_seconds 3.5", 1, quick)  # 1.0504
    for out, code in (("RESULT a_ratio 1.200 target <= 1.05\nRESULT b_seconds 3.5", 0),
                      ("RESULT a_ratio 1.010 target <= 1.05\nRESULT b_seconds 3.5", 1),
                      ("RESULT a_ratio 1.010 target <= 1.1\nRESULT b_seconds 3.5", 0),
                      ("RESULT a_ratio 1.010 target < 1.05\nRESULT b_seconds 3.5", 0),
                      ("RESULT a_ratio 1.010 target <= 1.05\nRESULT b_seconds 3.5\nbye", 0),
                      ("RESULT a_ratio 1.010 target <= 1.05", 0), ("Traceback ...", 1)):
        with pytest.raises(AssertionError):
            check_output(out, code, quick)
    with pytest.raises(AssertionError, match="missed its target"):
        check_output("RESULT a_ratio 1.200 target <= 1.05\nRESULT b_seconds 3.5", 1,
                     Quick((), quick.results, meets=True))
    dry = Quick((), (("a_ratio", "<=", 1.05),))
    check_output("RESULT a_ratio 1.200 target <= 1.05 (dry: not enforced)", 0, dry)
    with pytest.raises(AssertionError):
        check_output("RESULT a_ratio 1.200 target <= 1.05 (dry: not enforced)", 1, dry)


@pytest.mark.parametrize("script", [
    pytest.param(s, marks=[pytest.mark.slow] if q.slow else []) for s, q in QUICK.items()
    if not q.run_by])
def test_the_benchmark_runs_in_its_quick_mode(script, tmp_path):
    """The script in its quick mode, from an unrelated folder, with the checkout importable;
    one intra-op thread unless OMP_NUM_THREADS says otherwise (on a loaded machine torch's
    default of one per core turns a second of toy steps into tens)."""
    quick = QUICK[script]
    out = subprocess.run([sys.executable, str(BENCHMARKS / script), *quick.args],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env={"OMP_NUM_THREADS": "1", **os.environ, "PYTHONPATH": str(ROOT)})
    print(out.stdout)
    check_output(out.stdout, out.returncode, quick)
    assert out.returncode in (0, 1), out.stderr[-2000:]
