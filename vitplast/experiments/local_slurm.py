"""A one-node Slurm cluster on this machine, to try the cluster path (``vitplast sweep
--executor submitit --cluster slurm``) without a cluster, and to test it.

Paper: none (the machinery of section 2's grids on a cluster).

``up(folder)`` starts munge and a single-node ``slurmctld`` + ``slurmd`` on localhost from
Debian's ``slurm-wlm`` and ``munge`` packages, with every file of theirs in ``folder`` (its own
munge key and socket, ``slurm.conf``, state, spool, logs and pid files; free ports), never the
system's; ``down(folder)`` stops exactly the daemons ``up`` started, by their pid files. Slurm's
commands (``sbatch``, ``squeue``, ``scancel``, and submitit, which calls them) find the cluster
through ``SLURM_CONF=<folder>/slurm.conf``. The daemons run as root (``SlurmUser=root``), with
``proctrack/linuxproc`` and ``task/none`` (no cgroups), and without accounting (``sacct``
answers "accounting storage is disabled", as on many small clusters): job states come from
``squeue`` and the job folders (``vitplast.experiments.slurm_jobs``).

From a checkout: ``make slurm-up`` / ``make slurm-down`` (folder ``.slurm/``); else
``python -m vitplast.experiments.local_slurm up|down|status [FOLDER]``. Used by the tests
(``tests/conftest.py``) when the packages are installed and the tests run as root.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

#: The daemons ``up`` starts, in order; ``down`` stops them in reverse.
DAEMONS = ("munged", "slurmctld", "slurmd")
#: Every program the cluster needs, and the Debian packages that hold them.
PROGRAMS = {"munged": "munge", "slurmctld": "slurm-wlm", "slurmd": "slurm-wlm",
            "sbatch": "slurm-wlm", "squeue": "slurm-wlm", "scancel": "slurm-wlm",
            "sinfo": "slurm-wlm"}
INSTALL = "apt-get install -y slurm-wlm munge"
#: The cluster's one partition.
PARTITION = "local"

_CONF = """\
# A one-node Slurm cluster on localhost (vitplast.experiments.local_slurm); every file in {f}.
ClusterName=vitplast
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
AuthInfo=socket={f}/munge.sock
StateSaveLocation={f}/state
SlurmdSpoolDir={f}/spool
SlurmctldPidFile={f}/slurmctld.pid
SlurmdPidFile={f}/slurmd.pid
SlurmctldLogFile={f}/slurmctld.log
SlurmdLogFile={f}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# a cancelled or timed-out job gets SIGTERM, then SIGKILL 5 s later (Slurm's default: 30 s)
KillWait=5
MailProg=/bin/true
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName={partition} Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def missing() -> str | None:
    """Why ``up`` cannot start a cluster here (programs not installed, not root), or None."""
    absent = sorted(p for p in PROGRAMS if shutil.which(p) is None)
    if absent:
        packages = sorted({PROGRAMS[p] for p in absent})
        return (f"{', '.join(absent)} not installed (Debian packages {' and '.join(packages)}: "
                f"{INSTALL})")
    if os.geteuid() != 0:
        return "the one-node cluster's daemons run as root (SlurmUser=root); run as root"
    return None


def answers() -> bool:
    """Whether a Slurm answers here now: ``SLURM_CONF`` names one and ``sinfo`` reaches it."""
    return bool(os.environ.get("SLURM_CONF")) and subprocess.run(
        ["sinfo"], capture_output=True).returncode == 0


def env(folder: str | Path) -> dict:
    """The environment Slurm's commands need to reach the cluster of ``folder``."""
    return {**os.environ, "SLURM_CONF": str(Path(folder).resolve() / "slurm.conf")}


def running(folder: str | Path) -> list[str]:
    """The daemons of ``folder`` whose pid file names a live process."""
    return [d for d in DAEMONS if _pid(Path(folder), d) is not None]


def up(folder: str | Path, *, cpus: int | None = None, timeout: float = 60.0) -> Path:
    """Start the cluster of ``folder`` (made if missing) unless it runs; return its
    ``slurm.conf`` once its node takes jobs.

    Args:
        folder: where every file of the cluster lives.
        cpus: the node's CPUs (default: this machine's).
        timeout: seconds to wait for the node.

    Raises:
        RuntimeError: a program missing or not root (``missing``: the message says what to
            install), or a daemon that does not start (the message quotes its log).
    """
    why = missing()
    if why:
        raise RuntimeError(f"cannot start a local Slurm: {why}")
    f = Path(folder).resolve()
    if len(running(f)) == len(DAEMONS):
        return f / "slurm.conf"
    down(f)  # a partial cluster (a daemon died): start all three anew
    for sub in ("state", "spool"):
        (f / sub).mkdir(parents=True, exist_ok=True)
    key = f / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    ctld_port, d_port = _free_ports(2)
    (f / "slurm.conf").write_text(_CONF.format(
        f=f, ctld_port=ctld_port, d_port=d_port, cpus=cpus or os.cpu_count(),
        partition=PARTITION))
    commands = {
        "munged": ["munged", f"--socket={f}/munge.sock", f"--key-file={key}",
                   f"--pid-file={f}/munged.pid", f"--log-file={f}/munged.log",
                   f"--seed-file={f}/munged.seed", "--force"],
        "slurmctld": ["slurmctld"],
        "slurmd": ["slurmd", "-N", "localhost"],
    }
    for daemon in DAEMONS:
        done = subprocess.run(commands[daemon], env=env(f), capture_output=True, text=True)
        if done.returncode != 0 or not _wait(lambda: _pid(f, daemon), 10.0):
            raise RuntimeError(f"{daemon} did not start ({done.stderr.strip()}); its log: "
                               f"{_tail(f / f'{daemon}.log')}")
    if not _wait(lambda: idle(f), timeout):
        raise RuntimeError(f"the node did not come up in {timeout:.0f} s; slurmd's log: "
                           f"{_tail(f / 'slurmd.log')}")
    return f / "slurm.conf"


def idle(folder: str | Path) -> bool:
    """Whether the cluster's node takes jobs (``sinfo``: idle, mixed or allocated)."""
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env(folder), capture_output=True,
                          text=True)
    states = done.stdout.split()
    return done.returncode == 0 and bool(states) and all(
        s.rstrip("*") in ("idle", "mixed", "allocated") for s in states)


def down(folder: str | Path, timeout: float = 20.0) -> list[str]:
    """Stop the daemons of ``folder`` that run (SIGTERM, by their pid files, slurmd first),
    after cancelling the jobs of its cluster; return their names. Nothing else is
    signalled."""
    f, stopped = Path(folder), []
    if _pid(f, "slurmctld") is not None:  # its jobs first: their steps would outlive slurmd
        subprocess.run(["scancel", "--user", str(os.getuid())], env=env(f), capture_output=True)
        _wait(lambda: not subprocess.run(["squeue", "-h"], env=env(f), capture_output=True,
                                         text=True).stdout.strip(), timeout)
    for daemon in reversed(DAEMONS):
        pid = _pid(f, daemon)
        if pid is None:
            continue
        os.kill(pid, signal.SIGTERM)
        if not _wait(lambda: not _alive(pid), timeout):
            os.kill(pid, signal.SIGKILL)
        (f / f"{daemon}.pid").unlink(missing_ok=True)
        stopped.append(daemon)
    return stopped


def _pid(folder: Path, daemon: str) -> int | None:
    """The pid in ``daemon``'s pid file if that process lives and is ``daemon``."""
    try:
        pid = int((folder / f"{daemon}.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
    return pid if name == daemon[:15] else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def _wait(ready, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ready():
            return True
        time.sleep(0.2)
    return bool(ready())


def _free_ports(n: int) -> list[int]:
    """``n`` TCP ports free on localhost now."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text().splitlines()[-lines:])
    except OSError:
        return "(none)"


def main(argv: list[str] | None = None) -> int:
    """``python -m vitplast.experiments.local_slurm up|down|status [FOLDER]`` (default
    ``.slurm``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("up", "down", "status") or len(args) > 2:
        print("usage: python -m vitplast.experiments.local_slurm up|down|status [FOLDER]",
              file=sys.stderr)
        return 2
    action, folder = args[0], Path(args[1] if len(args) > 1 else ".slurm")
    if action == "up":
        try:
            conf = up(folder)
        except RuntimeError as err:
            print(err, file=sys.stderr)
            return 1
        print(f"a one-node Slurm runs ({', '.join(running(folder))}); for its commands:\n"
              f"export SLURM_CONF={conf}")
    elif action == "down":
        stopped = down(folder)
        print(f"stopped {', '.join(stopped)}" if stopped else f"nothing runs in {folder}")
    else:
        alive = running(folder)
        print(f"running: {', '.join(alive)}" if alive else f"nothing runs in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
