"""``vitplast data`` and ``vitplast cache`` (``vitplast.cli_files``): the archive's two lines
work as the README shows them, and the cache's place, parts and sizes are printed and cleared
as said (``VITPLAST_CACHE``, ``XDG_CACHE_HOME``), refusing a folder that is not a cache."""

import pytest

from vitplast import files
from vitplast.__main__ import main
from vitplast.cli_files import cache_parts
from vitplast.experiments import archive


def test_pack_then_unpack_print_the_lines_to_follow(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(files.DATA_ENV, str(tmp_path / "data"))
    for store in archive.shipped_stores():
        (tmp_path / "data" / store).mkdir(parents=True)
        (tmp_path / "data" / store / "README.md").write_text(store)
    assert main(["data", "pack", str(tmp_path / "dist")]) == 0
    packed = tmp_path / "dist" / f"{archive.archive_name()}.tar.gz"
    first, second = capsys.readouterr().out.strip().splitlines()
    assert first.startswith(f"{packed} (") and "finetune, confounds" in first
    assert second.endswith(f"vitplast data unpack {packed.name} DEST && export "
                           "VITPLAST_DATA=DEST")
    assert main(["data", "unpack", str(packed), str(tmp_path / "here")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == f"export VITPLAST_DATA={(tmp_path / 'here').resolve()}"
    assert (tmp_path / "here" / "suite_length" / "README.md").read_text() == "suite_length"


def test_data_errors_are_one_line_naming_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(files.DATA_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(SystemExit) as done:
        main(["data", "pack", str(tmp_path / "dist")])
    assert done.value.code == 2 and "VITPLAST_DATA=FOLDER" in capsys.readouterr().err
    (tmp_path / "not.tar.gz").write_text("text")
    with pytest.raises(SystemExit) as done:
        main(["data", "unpack", str(tmp_path / "not.tar.gz"), str(tmp_path / "x")])
    assert done.value.code == 2 and "not a readable archive" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # nothing made for a file that is not an archive


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """``$VITPLAST_CACHE`` holding two parts of known sizes."""
    folder = tmp_path / "cache"
    (folder / "data" / "fashion").mkdir(parents=True)
    (folder / "data" / "fashion" / "train.npy").write_bytes(b"x" * 3_000_000)
    (folder / "results").mkdir()
    (folder / "results" / "a.pkl").write_bytes(b"y" * 1_000_000)
    monkeypatch.setenv("VITPLAST_CACHE", str(folder))
    return folder


def test_cache_info_says_where_and_how_large(cache, capsys):
    assert cache_parts(cache) == {"data": 3_000_000, "results": 1_000_000}
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"cache: {cache} (set by VITPLAST_CACHE)"
    assert [line.split() for line in out[1:4]] == [
        ["data", "3.0", "MB"], ["results", "1.0", "MB"], ["total", "4.0", "MB"]]
    assert "vitplast cache clear" in out[-1]
    (cache / "small.json").write_text("x" * 2_500)  # a small part reads in kB, not "0.0 MB"
    main(["cache", "info"])
    assert ["small.json", "2.5", "kB"] in [line.split() for line in
                                          capsys.readouterr().out.splitlines()]


def test_cache_clear_deletes_the_parts_named_or_all(cache, capsys):
    assert main(["cache", "clear", "results"]) == 0
    assert capsys.readouterr().out.strip() == f"deleted results from {cache} (1.0 MB freed)"
    assert sorted(p.name for p in cache.iterdir()) == ["data"]
    with pytest.raises(SystemExit) as done:
        main(["cache", "clear", "resuts"])
    assert done.value.code == 2 and "valid: ['data']" in capsys.readouterr().err
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out.strip() == f"deleted data from {cache} (3.0 MB freed)"
    assert list(cache.iterdir()) == []
    assert main(["cache", "clear"]) == 0  # an empty (or absent) cache: nothing to do


def test_cache_clear_refuses_a_folder_that_is_not_a_cache(tmp_path, monkeypatch, capsys):
    (tmp_path / "project" / "src").mkdir(parents=True)
    (tmp_path / "project" / "pyproject.toml").write_text("")
    monkeypatch.setenv("VITPLAST_CACHE", str(tmp_path / "project"))
    with pytest.raises(SystemExit) as done:
        main(["cache", "clear"])
    assert done.value.code == 2 and "not a cache" in capsys.readouterr().err
    assert (tmp_path / "project" / "src").is_dir()


def test_an_installed_copy_s_cache_follows_xdg_cache_home(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("VITPLAST_CACHE", raising=False)
    installed = tmp_path / "site-packages" / "vitplast"  # no pyproject.toml above it
    monkeypatch.setattr(files, "__file__", str(installed / "files.py"))  # cache_dir's home
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert files.cache_dir() == tmp_path / "xdg" / "vitplast"
    main(["cache", "info"])
    assert capsys.readouterr().out.splitlines()[0] == (
        f"cache: {tmp_path / 'xdg' / 'vitplast'} (under XDG_CACHE_HOME; VITPLAST_CACHE=FOLDER "
        "moves it)")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert files.cache_dir() == tmp_path / "home" / ".cache" / "vitplast"


def test_the_readme_shows_the_two_lines_and_the_cache_commands():
    """The install page's pack and unpack lines, and the cache page's commands, are this
    CLI's commands."""
    import shlex
    from pathlib import Path

    from vitplast.__main__ import _parser

    docs = Path(__file__).resolve().parents[1] / "docs"
    readme = (docs / "install.md").read_text() + (docs / "cache.md").read_text()
    pack = next(line for line in readme.splitlines() if line.startswith("vitplast data pack"))
    unpack = next(line for line in readme.splitlines() if line.startswith("vitplast data unpack"))
    assert f"{archive.archive_name()}.tar.gz" in pack and "export VITPLAST_DATA=" in unpack
    for line in (pack, unpack.split("&&")[0], "vitplast cache info", "vitplast cache clear",
                 "vitplast cache clear results"):
        assert line.split("#")[0].strip() in readme
        _parser().parse_args(shlex.split(line.split("#")[0])[1:])  # exits on a bad line
