"""Claims (``vitplast.experiments.claims``): one holder at a time, a heartbeat while held, gone
when released; dead ones told from live ones, taken over, and removed only when their run is
finished."""

import json
import os
import socket
import subprocess
import sys
import time

from vitplast.experiments import claims


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write(path, host, pid, age):
    path.write_text(json.dumps(dict(host=host, pid=pid, token="x")))
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_a_claim_is_held_once_beats_and_goes_when_the_block_ends(tmp_path):
    path = tmp_path / "0123456789abcdef.claim"
    with claims.hold(path, heartbeat=0.05) as mine:
        assert mine
        owner = json.loads(path.read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
        with claims.hold(path) as again:
            assert not again  # held: a second claim is refused, and left as it is
        assert json.loads(path.read_text())["token"] == owner["token"]
        os.utime(path, (time.time() - 3600, time.time() - 3600))
        time.sleep(0.3)
        assert time.time() - path.stat().st_mtime < 60  # the heartbeat touched it again
    assert not path.exists()


def test_dead_and_live_owners_are_told_apart():
    here = socket.gethostname()
    assert claims.alive(dict(host=here, pid=os.getpid()), 0.0, claims.CLAIM_TIMEOUT_S)
    assert not claims.alive(dict(host=here, pid=_dead_pid()), 0.0, claims.CLAIM_TIMEOUT_S)
    assert claims.alive(dict(host="elsewhere", pid=1), 10.0, 60.0)  # cannot ask: heartbeat
    assert not claims.alive(dict(host="elsewhere", pid=1), 61.0, 60.0)
    assert not claims.alive(dict(host=here, pid=os.getpid()), 61.0, 60.0)  # stuck owner


def test_a_dead_claim_is_taken_over_and_a_live_one_is_not(tmp_path):
    here = socket.gethostname()
    dead = _write(tmp_path / "a.claim", here, _dead_pid(), 0)
    live = _write(tmp_path / "b.claim", here, os.getppid(), 0)
    with claims.hold(dead) as mine, claims.hold(live) as theirs:
        assert mine and not theirs
        assert json.loads(dead.read_text())["pid"] == os.getpid()
    assert not dead.exists() and json.loads(live.read_text())["pid"] == os.getppid()


def test_only_dead_claims_of_finished_runs_are_removed(tmp_path):
    here = socket.gethostname()
    assert claims.remove_dead(tmp_path, lambda p: True) == []
    assert list(tmp_path.iterdir()) == []  # no claim: no lock file either
    finished = _write(tmp_path / "a.claim", here, _dead_pid(), 0)
    unfinished = _write(tmp_path / "b.claim", here, _dead_pid(), 0)
    old = _write(tmp_path / "c.claim", "elsewhere", 1, 2 * claims.CLAIM_TIMEOUT_S)
    live = _write(tmp_path / "d.claim", here, os.getppid(), 0)
    done = {"a.claim", "c.claim", "d.claim"}
    assert claims.remove_dead(tmp_path, lambda p: p.name in done) == ["a.claim", "c.claim"]
    assert [p.exists() for p in (finished, unfinished, old, live)] == [False, True, False, True]
    assert [(p.name, o["pid"]) for p, o, _ in claims.present(tmp_path)] == [
        ("b.claim", json.loads(unfinished.read_text())["pid"]),
        ("d.claim", os.getppid())]
