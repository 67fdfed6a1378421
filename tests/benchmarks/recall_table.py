"""Print recall per rule on fixtures/recall (the numbers in docs/accuracy.md).

    python -m tests.benchmarks.recall_table
"""

from __future__ import annotations

from tests.lint.recall_score import score


def main() -> None:
    result = score()
    total = len(result.found) + len(result.missed)
    print(f"recall {len(result.found)}/{total} = {result.recall:.1%}")
    print("| rule | marks | found |")
    print("|---|---:|---:|")
    for code, (found, missed) in sorted(result.per_code.items()):
        print(f"| {code} | {found + missed} | {found} |")
    print("missed:", ", ".join(result.missed) or "none")
    print("warnings or errors in ok files:", ", ".join(result.false_alarms) or "none")


if __name__ == "__main__":
    main()
