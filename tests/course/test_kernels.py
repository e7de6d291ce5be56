"""The notebooks' kernels (``vitplast.course.kernels``): side by side they compute on their
share of the cores, read by torch inside a real kernel; a user's own OMP_NUM_THREADS stands."""

import os

import nbformat
import papermill

from vitplast.course import kernels


def test_kernels_side_by_side_compute_on_their_share_of_the_cores(tmp_path, monkeypatch):
    """Two kernels at once get half the cores each (OMP_NUM_THREADS in their environment, read
    by torch in the kernel); one kernel, or a user's own OMP_NUM_THREADS, is left as it is."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert kernels.threads_each(1) is None
    assert kernels.threads_each(2) == max(1, cores // 2)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert kernels.threads_each(2) is None
    monkeypatch.delenv("OMP_NUM_THREADS")
    source, target = tmp_path / "threads.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import torch\nprint(torch.get_num_threads())")]), source)
    papermill.execute_notebook(str(source), str(target), kernel_name="python3",
                               progress_bar=False, kernel_manager_class=kernels.manager(
                                   tmp_path / "kernel.log", tmp_path, threads=1))
    cell = nbformat.read(target, as_version=4).cells[0]
    assert cell.outputs[0]["text"].strip() == "1"
