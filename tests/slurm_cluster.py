"""A throwaway single-node Slurm for tests: munged, slurmctld and slurmd (Debian's `slurm-wlm`) started as this user
in a temporary folder, on free ports, with `SLURM_CONF` naming its configuration; stopped (by their pids) after.

`start(folder)` returns the `SLURM_CONF` path and the daemons' pid files, or raises `SlurmUnavailable` saying why
(not installed, not root, a daemon did not start, the node never became idle: the daemons' log lines)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")


class SlurmUnavailable(RuntimeError):
    """Slurm cannot be started here; the message says why."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(folder: Path, host: str) -> str:
    return "\n".join([
        "ClusterName=xmrtest", f"SlurmctldHost={host}", "SlurmUser=root", "SlurmdUser=root",
        "AuthType=auth/munge", f"AuthInfo=socket={folder}/munge.sock", "CredType=cred/munge",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU", "ReturnToService=2", "MpiDefault=none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd.log",
        f"NodeName={host} CPUs={os.cpu_count() or 1} RealMemory=4000 State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""])


def _logs(folder: Path) -> str:
    tails = []
    for name in ("munged.log", "slurmctld.log", "slurmd.log"):
        path = folder / name
        if path.is_file():
            tails += [f"{name}: {line}" for line in path.read_text(errors="replace").splitlines()[-3:]]
    return "; ".join(tails) or "no daemon logs"


def start(folder: Path, timeout_s: float = 30.0) -> Path:
    """Start the three daemons in `folder`; the `SLURM_CONF` path once the node is idle."""
    missing = [d for d in (*DAEMONS, "sbatch", "sinfo") if shutil.which(d) is None]
    if missing:
        raise SlurmUnavailable(f"Slurm is not installed ({', '.join(missing)} not found; apt-get install slurm-wlm)")
    if os.geteuid() != 0:
        raise SlurmUnavailable("starting slurmd needs root (it launches jobs as their users)")
    if not Path("/etc/munge/munge.key").is_file():
        raise SlurmUnavailable("no /etc/munge/munge.key (munge is not set up)")
    host = socket.gethostname().split(".")[0]
    (folder / "state").mkdir(parents=True, exist_ok=True)
    (folder / "spool").mkdir(exist_ok=True)
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder, host))
    commands = [["munged", "--force", f"--socket={folder}/munge.sock", "--key-file=/etc/munge/munge.key",
                 f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log",
                 f"--seed-file={folder}/munge.seed"],
                ["slurmctld", "-f", str(conf)], ["slurmd", "-f", str(conf)]]
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for command in commands:
        done = subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            stop(folder)
            raise SlurmUnavailable(f"{command[0]} did not start ({(done.stderr or done.stdout).strip()[:200]}); "
                                   f"{_logs(folder)}")
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%t"], check=False, env=env, capture_output=True, text=True).stdout.strip()
        if state == "idle":
            return conf
        time.sleep(0.5)
    stop(folder)
    raise SlurmUnavailable(f"the Slurm node did not become idle in {timeout_s:g} s; {_logs(folder)}")


def stop(folder: Path, drain_s: float = 30.0) -> None:
    """Wait (at most `drain_s`) for the queue to empty, cancel what is left, then stop the daemons this folder's pid
    files name."""
    env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    deadline = time.time() + drain_s
    while time.time() < deadline and shutil.which("squeue"):
        queue = subprocess.run(["squeue", "-h"], check=False, env=env, capture_output=True, text=True)
        if queue.returncode != 0 or not queue.stdout.strip():
            break
        time.sleep(0.5)
    else:
        subprocess.run(["scancel", "--user", str(os.getuid())], check=False, env=env, capture_output=True)
        time.sleep(2)
    for daemon in reversed(DAEMONS):
        pid_file = folder / f"{daemon}.pid"
        if pid_file.is_file():
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
