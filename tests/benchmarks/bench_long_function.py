"""How lint time grows with the length of one function (not a test).

A training loop whose body repeats one block (forward, loss summed with its
graph, output collected, tensor logged, ``backward(retain_graph=True)``) N
times has about 4N findings in one function; rules that re-scan the whole
function or loop for each finding make the time grow with N squared. The
second shape is an ``if``/``elif`` chain of N branches inside such a loop,
each branch with a finding: ``elif`` nests, so the chain is N levels deep,
and an analysis that walks a node's ancestors for each finding grows with
N squared too. This prints the wall time of ``memlint check --no-cache
--jobs 1`` for a few N.

Run::

    python tests/benchmarks/bench_long_function.py [--blocks 50 150 300] [--branches 300 1000 2500]
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


BRANCH = "        {keyword} y == {i}:\n            total += loss\n            torch.cuda.empty_cache()\n"
LOOP_START = "        loss = crit(model(x), y)\n        loss.backward()\n        opt.step()\n"


def source(blocks: int) -> str:
    """The training loop with ``blocks`` repeated blocks (6 lines each)."""
    return HEAD + "".join(BLOCK.format(i=i) for i in range(blocks)) + "        opt.step()\n"


def elif_source(branches: int) -> str:
    """The training loop ending in an ``if``/``elif`` chain of ``branches`` branches (3 lines each)."""
    chain = "".join(BRANCH.format(keyword="if" if i == 0 else "elif", i=i) for i in range(branches))
    return HEAD + LOOP_START + chain


def seconds(path: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "memlint", "check", "--no-cache", "--jobs", "1", "--exit-zero", str(path)],
                   check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, nargs="+", default=[50, 150, 300])
    parser.add_argument("--branches", type=int, nargs="+", default=[300, 1000, 2500])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        for title, sizes, make in (("blocks", args.blocks, source), ("elif branches", args.branches, elif_source)):
            print(f"| {title} | lines | wall |\n|---:|---:|---:|")
            for size in sizes:
                path = Path(work) / f"case_{size}.py"
                path.write_text(make(size))
                print(f"| {size} | {len(make(size).splitlines())} | {seconds(path):.2f} s |")
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
