"""``--statistics``: how many findings of each code, most frequent first."""

from __future__ import annotations

from collections import Counter


def render(run, args, stream) -> None:
    counts = Counter((d.code, d.name) for d in run.diagnostics)
    fixable = Counter(d.code for d in run.diagnostics if d.fix is not None)
    for (code, name), count in sorted(counts.items(), key=lambda item: (-item[1], item[0][0])):
        mark = "[*]" if fixable[code] else "   "
        print(f"{count:>6}\t{code}\t{mark} {name}", file=stream)
