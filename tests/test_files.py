"""Files (``vitplast.files``): the one atomic write of the kit, and JSON read back."""

import re
from pathlib import Path

import pytest

import vitplast
from vitplast import files


def test_a_failed_write_leaves_the_old_file_whole_and_no_temp_file(tmp_path):
    target = tmp_path / "a.json"
    files.write_json(target, {"old": 1})
    with pytest.raises(RuntimeError), files.atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError
    assert files.read_json(target) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    (tmp_path / "b.json").write_text('{"half": ')
    assert files.read_json(tmp_path / "b.json") is None and files.read_json(tmp_path / "c") is None


def test_no_other_module_replaces_a_file():
    """``atomic_path`` is the one place a file is replaced (records, companions, the cache,
    checkpoints, the unpacked Fashion-MNIST all go through it)."""
    package = Path(vitplast.__file__).parent
    callers = [p.name for p in package.rglob("*.py") if re.search(r"os\.replace\(", p.read_text())]
    assert callers == ["files.py"]
