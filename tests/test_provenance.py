"""What made a result: the machine, the versions, the git state of the checkout, the date
(``vitplast.provenance``)."""

from pathlib import Path

import torch

from vitplast import provenance


def test_provenance_names_the_machine_versions_and_date():
    p = provenance.provenance(torch.device("cpu"))
    assert p["machine"].endswith("cores") and p["torch"] == torch.__version__
    assert set(p) == {"machine", "vitplast", "torch", "timm", "python", "git_commit",
                      "git_dirty", "date"}
    assert p["date"].endswith("+00:00")  # UTC


def test_the_git_state_is_the_checkouts_own():
    """In a checkout, the commit is the checkout's HEAD (the package sits one folder below it)."""
    import subprocess

    repo = Path(provenance.__file__).resolve().parents[1]
    commit, dirty = provenance.git_state()
    if (repo / ".git").exists():  # a folder, or a file in a git worktree
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        assert commit == head and isinstance(dirty, bool)
    else:
        assert (commit, dirty) == (None, None)


def test_a_shipped_command_names_no_machine_folder(tmp_path):
    command = f"python -m vitplast sweep --study suite --root {tmp_path}/data/suite --shard 0/2"
    assert provenance.shipped_command(command).endswith("--root data/suite --shard 0/2")
    assert provenance.shipped_command("vitplast sweep --root /data/x") == (
        "vitplast sweep --root /data/x")  # short paths are not a machine's folders
