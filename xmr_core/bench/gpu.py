"""`python -m xmr_core.bench gpu`: is this machine ready for the paper profile's GPU job? One chapter notebook's
paper-smoke path on CUDA, timed, with its peak GPU memory.

Runs `xmr book run NOTEBOOK --profile paper-smoke -p DEVICE cuda` (default `01_pcme/train` on `cub`) on a small copy
of the data set in its real layout (`--data PATH`, else the test suite's fixture, `bench paperplan.fixture_writer`)
with a fresh run cache and the results in a temporary folder: the paper profile's code path on the GPU, as the papers'
code trains (mixed precision, `TrainConfig.amp`; batches loaded by `recipes.LOADER_WORKERS` worker processes, which the
paper profiles' recipe sets on CUDA). Prints the notebook's outcome and seconds and the peak GPU memory in use while it
ran (the device's, sampled every 0.2 s by `torch.cuda.mem_get_info`, less what was in use before: the notebook runs in
its own kernel, whose allocator this process cannot read). Without CUDA it stops at once in one line.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

import torch

from xmr_core.bench.paperplan import fixture_writer
from xmr_core.book import runner as book
from xmr_core.experiment.recipes import pcme_train_config

NO_CUDA = "bench gpu: torch sees no CUDA device (torch.cuda.is_available() is False); run it on the GPU machine"


class PeakMemory:
    """The most device memory in use (bytes, `torch.cuda.mem_get_info`) while the block runs, sampled every
    `every` seconds on a thread, less what was in use when it started."""

    def __init__(self, device: int = 0, every: float = 0.2) -> None:
        self.device, self.every, self.peak = device, every, 0
        self._stop = threading.Event()

    def _used(self) -> int:
        free, total = torch.cuda.mem_get_info(self.device)
        return total - free

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, self._used() - self.base)

    def __enter__(self) -> Self:
        self.base = self._used()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m xmr_core.bench gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", default="01_pcme/train", help="a notebook of the chapter (default 01_pcme/train)")
    parser.add_argument("--dataset", default="cub", help="a data set its paper used (default cub)")
    parser.add_argument("--data", type=Path, help="the data set's copy in its real layout (default: the fixture)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit(NO_CUDA)
    recipe = pcme_train_config("paper-smoke", device="cuda")
    print(f"{torch.cuda.get_device_name(0)}: paper-smoke {args.notebook} on {args.dataset}, AMP {recipe.amp}, "
          f"{recipe.num_workers} loader workers")
    old = os.environ.get("XMR_CACHE")
    with tempfile.TemporaryDirectory(prefix="xmr-gpu-") as tmp:
        os.environ["XMR_CACHE"] = str(Path(tmp) / "cache")
        try:
            root = args.data or fixture_writer(args.dataset)(Path(tmp) / args.dataset)
            t0 = time.perf_counter()
            with PeakMemory() as memory:
                summary = book.run_book([args.notebook], profile="paper-smoke", force=True,
                                        params={"DATASET": args.dataset, "DATA_ROOT": str(root), "DEVICE": "cuda",
                                                "RESULTS_DIR": str(Path(tmp) / "results")})
            seconds = time.perf_counter() - t0
        finally:
            if old is None:
                os.environ.pop("XMR_CACHE", None)
            else:
                os.environ["XMR_CACHE"] = old
    status = ", ".join(f"{o.notebook.label} {o.status}" for o in summary.outcomes)
    print(f"{status}: {seconds:.1f} s, peak GPU memory {memory.peak / 2**30:.2f} GiB")
    print(f"seconds={seconds:.1f} peak_gib={memory.peak / 2**30:.2f} ok={summary.ok} amp={recipe.amp} "
          f"loader_workers={recipe.num_workers}")
    if not summary.ok:
        raise SystemExit(1)
