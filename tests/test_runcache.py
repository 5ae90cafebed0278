"""Run claims (`xmr_core.runs.cache`) and `fit` under real concurrent processes: a run is trained once, by one
worker; every worker returns the weights the run's result describes; a killed worker's claim is taken over."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xmr_core.liveness import Owner
from xmr_core.runs.cache import ClaimLost, ClaimPolicy, acquire, current, try_claim
from xmr_core.runs.train import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), **extra}


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


def _plant(run_dir: Path, number: int, host: str, pid: int, start: str = "0", released: bool = False) -> Path:
    """A claim file as another worker would have left it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"claim.{number}"
    path.write_text(json.dumps({"owner": {"host": host, "pid": pid, "start": start}, "claimed_at": time.time(),
                                "released": released}))
    return path


def _claims(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if p.name.startswith("claim"))


# ----------------------------------------------------------------------------------- the claim protocol


def test_a_live_claim_is_respected_and_a_released_one_is_free(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = try_claim(run)
    assert first is not None and first.took_over is None and _claims(run) == ["claim.0"]
    assert try_claim(run) is None  # this process holds it, and runs
    assert current(run).owner == Owner.current() and not current(run).released
    first.release(finished=False)
    assert _claims(run) == ["claim.1"] and current(run).released
    second = try_claim(run)
    assert second is not None and second.took_over is None and _claims(run) == ["claim.2"]
    second.release(finished=True)  # a finished run keeps no claim files
    assert _claims(run) == []


def test_dead_claims_are_taken_over(tmp_path: Path) -> None:
    me = Owner.current()
    gone = tmp_path / "gone"
    _plant(gone, 0, me.host, _dead_pid())
    claim = try_claim(gone)
    assert claim is not None and claim.took_over.number == 0 and _claims(gone) == ["claim.1"]
    claim.release(finished=True)
    reused = tmp_path / "reused"  # this pid, but the claim's process started at another time: not this one
    _plant(reused, 4, me.host, me.pid, start="1")
    claim = try_claim(reused)
    assert claim is not None and claim.number == 5 and claim.took_over.owner.start == "1"
    claim.release(finished=True)
    # another host's claim: live while its heartbeat is recent, dead once it is older than stale_after_s
    remote = tmp_path / "remote"
    path = _plant(remote, 0, "elsewhere.example", 1)
    policy = ClaimPolicy(heartbeat_s=1.0, stale_after_s=10.0)
    assert try_claim(remote, policy) is None
    os.utime(path, (time.time() - 11, time.time() - 11))
    claim = try_claim(remote, policy)
    assert claim is not None and claim.took_over.owner.host == "elsewhere.example"
    claim.release(finished=True)


def test_the_heartbeat_touches_the_claim_and_a_lost_claim_is_noticed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    claim = try_claim(run, ClaimPolicy(heartbeat_s=0.05, stale_after_s=1.0))
    os.utime(claim.path, (0, 0))
    time.sleep(0.3)
    assert time.time() - claim.path.stat().st_mtime < 0.3
    claim.check()
    _plant(run, claim.number + 1, "elsewhere.example", 1)  # another host took it over (heartbeat judged stale)
    assert not claim.held()
    with pytest.raises(ClaimLost, match="taken over by elsewhere.example pid 1"):
        claim.check()
    claim.release(finished=False)  # leaves the new owner's claim alone: no released record on top of it
    assert current(run).number == 1 and current(run).owner.host == "elsewhere.example"


def test_acquire_waits_for_the_live_owner_then_reads_the_finished_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], env=_env(), stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline().strip() == "claimed"
    lines: list[str] = []
    start = time.time()
    got = acquire(run, lambda: (run / "done").exists(), ClaimPolicy(poll_s=0.1), log=lines.append)
    assert got is None and time.time() - start > 0.5 and holder.wait() == 0
    assert len(lines) == 1 and f"pid {holder.pid}" in lines[0] and "waiting" in lines[0]
    assert _claims(run) == []


HOLDER = """
import sys, time
from pathlib import Path
from xmr_core.runs.cache import try_claim
run = Path(sys.argv[1])
claim = try_claim(run)
print("claimed", flush=True)
time.sleep(1.0)
(run / "done").write_text("")
claim.release(finished=True)
"""

TAKER = """
import json, os, sys, time
from xmr_core.runs.cache import try_claim
run, go, out = sys.argv[1:4]
open(out + ".ready", "w").close()
while not os.path.exists(go):
    time.sleep(0.002)
claim = try_claim(run)
open(out, "w").write(json.dumps(None if claim is None else claim.number))
time.sleep(0.5)  # hold it while the others look
"""


def test_of_processes_taking_over_one_dead_claim_at_once_exactly_one_wins(tmp_path: Path) -> None:
    me = Owner.current()
    for rep in range(4):
        run, go = tmp_path / f"run{rep}", tmp_path / f"go{rep}"
        _plant(run, 2, me.host, _dead_pid())
        outs = [tmp_path / f"out{rep}-{i}.json" for i in range(4)]
        takers = [subprocess.Popen([sys.executable, "-c", TAKER, str(run), str(go), str(out)], env=_env())
                  for out in outs]
        while not all(Path(f"{out}.ready").exists() for out in outs):  # every taker polls for the go
            time.sleep(0.01)
        go.write_text("")
        assert [p.wait() for p in takers] == [0] * 4
        got = [json.loads(out.read_text()) for out in outs]
        assert sorted(got, key=str) == [3, None, None, None], got


# --------------------------------------------------------------------- fit in real, concurrent processes


@pytest.fixture(scope="module")
def ctx() -> multiprocessing.context.BaseContext:
    """Fresh worker processes forked from a server that has imported torch and xmr_core once (the server
    imports what it can from its own sys.path, which lacks tests/; the worker module itself is light)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["xmr_core.runs.train", "xmr_core.methods.vse", "xmr_core.evaluate"])
    return context


def _worker(ctx, report: Path, cache: Path, **kw) -> multiprocessing.Process:
    """A process running `fixtures.fit_worker.work` (one tiny run; `go`, `delay`, `epoch_sleep`, `out_dir`)."""
    from fixtures.fit_worker import work

    process = ctx.Process(target=work, args=(report, cache), kwargs=kw)
    process.start()
    return process


def _go(workers: list, reports: list[Path], go: Path) -> list[str]:
    """Wait until every worker is ready, start them (`go`), return their output once they exit."""
    while not all(r.with_suffix(".ready").exists() for r in reports):
        assert all(w.exitcode is None for w in workers), [r.with_suffix(".log").read_text() for r in reports]
        time.sleep(0.02)
    go.write_text("")
    for w in workers:
        w.join(timeout=300)
    outputs = [r.with_suffix(".log").read_text() for r in reports]
    assert [w.exitcode for w in workers] == [0] * len(workers), outputs
    return outputs


@pytest.fixture(scope="module")
def reference(ctx, tmp_path_factory) -> str:
    """The state fingerprint of the worker's run trained alone, uninterrupted, in its own directory."""
    tmp = tmp_path_factory.mktemp("reference")
    worker = _worker(ctx, tmp / "ref.json", tmp / "cache", out_dir=tmp / "run")
    worker.join(timeout=300)
    assert worker.exitcode == 0, (tmp / "ref.log").read_text()
    report = json.loads((tmp / "ref.json").read_text())
    assert not report["cached"] and report["epochs"] == [0, 1, 2, 3] and report["returned"] == report["best_state"]
    return report["returned"]


def _check_run(reports: list[dict], reference: str, first_epoch: int = 0) -> Path:
    """Every worker returned the weights the run's result.json describes, which are the uninterrupted run's;
    one worker trained the run (from `first_epoch`), the others loaded it. Returns the run directory."""
    run_dirs = {r["run_dir"] for r in reports}
    assert len(run_dirs) == 1
    run_dir = Path(run_dirs.pop())
    described = json.loads((run_dir / "result.json").read_text())["best_state"]
    assert described == reference
    assert [r["returned"] for r in reports] == [described] * len(reports)
    assert [r["best_state"] for r in reports] == [described] * len(reports)
    assert sorted(r["cached"] for r in reports) == [False] + [True] * (len(reports) - 1)
    assert [r["epochs"] for r in reports if not r["cached"]] == [list(range(first_epoch, 4))]
    assert all(r["epochs"] == [] for r in reports if r["cached"])
    assert sorted(p.name for p in run_dir.iterdir()) == ["best.pt", "last.pt", "metrics.csv", "result.json"]
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize("delays", [(0.0, 0.5, 1.0, 2.0), (0.0, 0.0, 0.1, 0.3), (0.0, 1.2, 1.5, 2.5)])
def test_workers_started_at_staggered_times_train_the_run_once(ctx, tmp_path: Path, reference: str,
                                                               delays: tuple[float, ...]) -> None:
    cache, go = tmp_path / "cache", tmp_path / "go"
    reports = [tmp_path / f"w{i}.json" for i in range(len(delays))]
    workers = [_worker(ctx, r, cache, epoch_sleep=0.6, go=go, delay=d) for r, d in zip(reports, delays)]
    outputs = _go(workers, reports, go)
    _check_run([json.loads(r.read_text()) for r in reports], reference)
    # the race happened: the workers that started while the run trained waited for it (4 epochs >= 2.4 s)
    assert sum("waiting for it to finish" in out for out in outputs) >= 2, outputs


@pytest.mark.slow
@pytest.mark.parametrize("epoch_sleep", [1.0, 0.0])
def test_a_killed_workers_claim_is_taken_over(ctx, tmp_path: Path, reference: str, epoch_sleep: float) -> None:
    """kill -9 a worker after its first epoch (in its pause after the epoch, or wherever its second epoch has
    got to); of two workers started next, one takes the run over and goes on from its last checkpoint, the
    other waits; the run ends with the weights of the uninterrupted run."""
    cache, go = tmp_path / "cache", tmp_path / "go"
    victim = _worker(ctx, tmp_path / "victim.json", cache, epoch_sleep=epoch_sleep)
    progress = tmp_path / "victim.epochs"
    while not (progress.exists() and progress.read_text()):
        assert victim.exitcode is None, (tmp_path / "victim.log").read_text()
        time.sleep(0.01)
    victim.kill()
    victim.join()
    run_dir = next((cache / "runs").iterdir())
    assert _claims(run_dir) == ["claim.0"] and not (run_dir / "result.json").exists()
    resumed_at = load_checkpoint(run_dir / "last.pt")["epoch"]
    assert resumed_at >= 1
    reports = [tmp_path / f"w{i}.json" for i in range(2)]
    workers = [_worker(ctx, r, cache, epoch_sleep=0.3, go=go, delay=d) for r, d in zip(reports, (0.0, 0.5))]
    outputs = _go(workers, reports, go)
    assert _check_run([json.loads(r.read_text()) for r in reports], reference, resumed_at) == run_dir
    assert sum(f"took over the dead claim of {Owner.current().host} pid {victim.pid}" in out
               and f"going on from the dead worker's last.pt (epoch {resumed_at})" in out for out in outputs) == 1, outputs
