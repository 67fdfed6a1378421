"""How lint time grows with the length of one function (not a test).

A training loop whose body repeats one block (forward, loss summed with its
graph, output collected, tensor logged, ``backward(retain_graph=True)``) N
times has about 4N findings in one function; rules that re-scan the whole
function or loop for each finding make the time grow with N squared. This
prints the wall time of ``memlint check --no-cache --jobs 1`` for a few N.

Run::

    python tests/benchmarks/bench_long_function.py [--blocks 50 150 300]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLOCK = (
    "        out{i} = model(x)\n"
    "        loss{i} = crit(out{i}, y) + 0.0\n"
    "        total += loss{i}\n"
    "        losses.append(loss{i})\n"
    "        wandb.log({{\"l\": loss{i}}})\n"
    "        loss{i}.backward(retain_graph=True)\n"
)
HEAD = "import torch, wandb\ndef train(model, loader, crit, opt):\n    total = 0\n    losses = []\n    for x, y in loader:\n"


def source(blocks: int) -> str:
    """The training loop with ``blocks`` repeated blocks (6 lines each)."""
    return HEAD + "".join(BLOCK.format(i=i) for i in range(blocks)) + "        opt.step()\n"


def seconds(path: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "memlint", "check", "--no-cache", "--jobs", "1", "--exit-zero", str(path)],
                   check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, nargs="+", default=[50, 150, 300])
    args = parser.parse_args()
    print("| blocks | lines | wall |\n|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as work:
        for blocks in args.blocks:
            path = Path(work) / f"loop_{blocks}.py"
            path.write_text(source(blocks))
            print(f"| {blocks} | {len(source(blocks).splitlines())} | {seconds(path):.2f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
