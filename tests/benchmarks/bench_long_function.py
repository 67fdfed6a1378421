"""How lint time grows with the length of one function (not a test).

A training loop whose body repeats one block (forward, loss summed with its
graph, output collected, tensor logged, ``backward(retain_graph=True)``) N
times has about 4N findings in one function; rules that re-scan the whole
function or loop for each finding make the time grow with N squared. The
second shape is an ``if``/``elif`` chain of N branches inside such a loop,
each branch with a finding: ``elif`` nests, so the chain is N levels deep,
and an analysis that walks a node's ancestors for each finding grows with
N squared too. The third shape nests N training loops (an analysis that
re-interprets a loop body per iteration of the loop around it is
exponential in N), and the fourth is a dense file of N small training
functions (about 1 MiB at N = 3700, near the largest file memlint lints), for
growth in the size of a whole file. The fifth sums, in a training loop, ten
attribute chains N attributes long (``out.grad.grad...``): an analysis that
spells each attribute's dotted name from scratch is N squared. This prints the wall time of
``memlint check --no-cache --jobs 1`` for a few N.

Run::

    python tests/benchmarks/bench_long_function.py [--blocks 50 150 300] [--branches 300 1000 2500]
        [--depths 5 10 20] [--functions 1000 2000 3700] [--chains 700 1400 2800]
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


FUNCTION = (
    "def train_{i}(model, loader, opt, crit):\n"
    "    model.train()\n"
    "    total, outs = 0.0, []\n"
    "    for x, y in loader:\n"
    "        out = model(x)\n"
    "        loss = crit(out, y)\n"
    "        loss.backward()\n"
    "        opt.step()\n"
    "        total += loss\n"
    "        outs.append(out)\n"
    "    return total, train_{previous}\n"
)


def nested_source(depth: int) -> str:
    """A training step inside ``depth`` nested loops."""
    lines = ["import torch", "def train(model, loader, opt):", "    model.train()", "    total, h = 0.0, None"]
    indent = "    "
    for level in range(depth):
        lines.append(f"{indent}for x{level} in loader:")
        indent += "    "
    lines += [f"{indent}loss = model(x0).sum()", f"{indent}loss.backward()", f"{indent}opt.step()",
              f"{indent}total += loss", f"{indent}h = model(h)"]
    return "\n".join(lines) + "\n"


def dense_source(functions: int) -> str:
    """``functions`` small training functions (each refers to the one before)."""
    return "import torch\n" + "".join(FUNCTION.format(i=i, previous=max(i - 1, 0)) for i in range(functions))


def chain_source(length: int) -> str:
    """A training loop adding ten ``length``-attribute chains into totals."""
    chain = "out" + ".grad" * length
    sums = "".join(f"    total{i} = total{i} + {chain}\n" for i in range(10))
    return "import torch\nfor x in loader:\n    out = model(x)\n" + sums


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
    parser.add_argument("--depths", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--functions", type=int, nargs="+", default=[1000, 2000, 3700])
    parser.add_argument("--chains", type=int, nargs="+", default=[700, 1400, 2800])
    args = parser.parse_args()
    shapes = (("blocks", args.blocks, source), ("elif branches", args.branches, elif_source),
              ("nested loops", args.depths, nested_source), ("dense file: functions", args.functions, dense_source),
              ("attribute chain length", args.chains, chain_source))
    with tempfile.TemporaryDirectory() as work:
        for title, sizes, make in shapes:
            print(f"| {title} | lines | wall |\n|---:|---:|---:|")
            for size in sizes:
                path = Path(work) / f"case_{size}.py"
                path.write_text(make(size))
                text = make(size)
                print(f"| {size} | {len(text.splitlines())} ({len(text.encode()) / 2**10:.0f} KiB) | {seconds(path):.2f} s |")
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
