"""The lint benchmark's bookkeeping (tests/benchmarks/bench_lint.py), without
running any tool: corpus selection, copying and the docs section it writes."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent / "benchmarks"


@pytest.fixture()
def bench(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    module = importlib.import_module("bench_lint")
    monkeypatch.setattr(module, "PERFORMANCE_DOC", tmp_path / "performance.md")
    yield module
    sys.modules.pop("bench_lint", None)


def test_corpus_directories_are_searched_and_copied(bench, tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "train.py").write_text("x = 1\n")
    (repo / ".venv" / "lib").mkdir(parents=True)
    (repo / ".venv" / "lib" / "site.py").write_text("y = 2\n")
    (repo / "notes.txt").write_text("z\n")
    files = bench.python_files_under([str(repo)])
    assert files == [str(repo / "pkg" / "train.py")]
    copies = bench.copy_corpus(files, tmp_path / "work", [str(repo)])
    assert copies == [str(tmp_path / "work" / "repo" / "pkg" / "train.py")]
    assert Path(copies[0]).read_text() == "x = 1\n"


def test_sections_are_replaced_by_name_and_other_text_is_kept(bench):
    doc = bench.PERFORMANCE_DOC
    doc.write_text("# Performance\n\n<!-- a:begin -->\nold a\n<!-- a:end -->\n\n## Estimator\nkept\n")
    bench.write_report("new a", "a")
    bench.write_report("new b", "b")
    text = doc.read_text()
    assert "old a" not in text and "<!-- a:begin -->\nnew a\n<!-- a:end -->" in text
    assert "## Estimator\nkept" in text
    assert text.rstrip().endswith("<!-- b:begin -->\nnew b\n<!-- b:end -->")
