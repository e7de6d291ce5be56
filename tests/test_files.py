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


def test_a_damaged_file_is_set_aside_whole_never_over_another(tmp_path):
    target = tmp_path / "study.json"
    for text in ('{"sessions": {}}', '{"half": '):
        target.write_text(text)
        aside = files.set_aside(target)
        assert not target.exists() and aside.read_text() == text
        assert re.fullmatch(r"study\.json\.invalid-\d{8}T\d{6}Z(-2)?", aside.name)
    assert len(list(tmp_path.glob("study.json.invalid-*"))) == 2  # same second: -2, none lost


def test_locked_blocks_take_turns(tmp_path):
    """Two processes in ``locked`` blocks of one path never overlap (a read-modify-write each
    adds one line: none is lost)."""
    import multiprocessing

    path = tmp_path / "log.txt"
    path.write_text("")

    def add(i):
        for _ in range(20):
            with files.locked(path):
                text = path.read_text()
                path.write_text(text + f"{i}\n")

    procs = [multiprocessing.get_context("fork").Process(target=add, args=(i,)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert sorted(path.read_text().split()) == sorted(["0", "1", "2"] * 20)


def test_read_checked_checks_each_version_of_a_file_once(tmp_path):
    """The check runs once per version of the file (path, inode, size, mtime) in a process:
    read again, the problems are remembered; rewritten (atomically), it is checked again;
    a missing file reads as None and is checked every time."""
    from vitplast.files import read_checked, write_json

    calls = []

    def check(content):
        calls.append(content)
        return [] if content and content.get("ok") else ["not ok"]

    path = write_json(tmp_path / "a.json", {"ok": True})
    assert read_checked(path, "t", check) == ({"ok": True}, [])
    assert read_checked(path, "t", check) == ({"ok": True}, []) and len(calls) == 1
    write_json(path, {"ok": False, "pad": "x"})
    assert read_checked(path, "t", check) == ({"ok": False, "pad": "x"}, ["not ok"])
    assert len(calls) == 2
    assert read_checked(tmp_path / "none.json", "t", check) == (None, ["not ok"])
    assert read_checked(tmp_path / "none.json", "t", check)[0] is None and len(calls) == 4


def test_results_root_from_a_checkout_or_the_environment(tmp_path, monkeypatch):
    """The shipped stores: a checkout's ``data/`` unless ``$VITPLAST_DATA`` names another
    folder; ``require_results`` says how to get one that is absent."""
    from vitplast.experiments import studies

    monkeypatch.delenv(files.DATA_ENV, raising=False)
    checkout = Path(vitplast.__file__).resolve().parents[1] / "data"
    assert files.results_root("finetune") == checkout / "finetune"
    assert (studies.get("main").root(), studies.get("confounds").root()) == (
        checkout / "finetune", checkout / "confounds")
    monkeypatch.setenv(files.DATA_ENV, str(tmp_path))
    assert files.results_root("confounds") == tmp_path / "confounds"
    with pytest.raises(FileNotFoundError, match="VITPLAST_DATA"):
        files.require_results(tmp_path / "confounds")
    (tmp_path / "confounds").mkdir()
    assert files.require_results(tmp_path / "confounds") == tmp_path / "confounds"
