"""The one-node Slurm on localhost (``vitplast.experiments.local_slurm``): ``up`` starts munge,
slurmctld and slurmd with every file in its folder, ``down`` stops exactly those daemons, a
missing package is named with its install line. Needs root and the packages (the ``slurm``
fixture skips saying why); the cluster path itself is tested in ``test_slurm.py``."""

import subprocess
from pathlib import Path

import pytest

from vitplast.experiments import local_slurm


def test_slurm_up_and_down_start_and_stop_exactly_their_own_daemons(slurm, tmp_path):
    """A second one-node cluster beside the tests' own: ``down`` stops its three daemons,
    by their pid files, and the other cluster keeps answering."""
    conf = local_slurm.up(tmp_path / "other")
    assert conf != Path(slurm) and local_slurm.running(tmp_path / "other") == list(
        local_slurm.DAEMONS)
    pids = [int((tmp_path / "other" / f"{d}.pid").read_text()) for d in local_slurm.DAEMONS]
    assert local_slurm.down(tmp_path / "other") == list(reversed(local_slurm.DAEMONS))
    assert local_slurm.running(tmp_path / "other") == []
    assert all(_gone(pid) for pid in pids)
    assert subprocess.run(["sinfo"], capture_output=True).returncode == 0  # ours still up
    assert local_slurm.down(tmp_path / "other") == []


def _gone(pid: int) -> bool:
    """The process ``pid`` has exited (a zombie not yet reaped by init counts)."""
    try:
        return "zombie" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def test_a_missing_package_is_named_with_its_install_line(monkeypatch):
    monkeypatch.setattr(local_slurm.shutil, "which",
                        lambda name: None if name == "munged" else f"/usr/bin/{name}")
    assert local_slurm.missing() == ("munged not installed (Debian packages munge: "
                                     "apt-get install -y slurm-wlm munge)")
    with pytest.raises(RuntimeError, match="cannot start a local Slurm: munged not installed"):
        local_slurm.up("unused")


def test_the_jobs_read_their_partition_from_sinfo(slurm):
    """The cluster's one partition has no time limit (a job's default limit: none) and at most
    this machine's CPUs idle; a partition named explicitly reads the same."""
    import os

    from vitplast.experiments import jobs

    for parameters in ({}, {"slurm_partition": local_slurm.PARTITION}):
        assert jobs.default_minutes("slurm", parameters) == 0
        assert 1 <= jobs.slots("slurm", parameters) <= os.cpu_count()
