"""Jupyter notebooks: masking, cell positions in every format, directories,
configuration, directives, bad notebooks, the cache and ``--fix``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memlint.lint.engine import LintOptions, lint_source
from memlint.lint.notebook import NotebookError, load, mask_cell, notebook_from_cells, rewrite_sources, source_spans
from memlint.lint.registry import rule_index

from .helpers import REPO, run_memlint

ALL = frozenset(rule_index())
TRAIN = REPO / "fixtures" / "notebooks" / "train_leak.ipynb"
CLEAN = REPO / "fixtures" / "notebooks" / "train_clean.ipynb"


def lint_nb(path: str, text: str, codes=ALL):
    return lint_source(path, text.encode("utf-8"), LintOptions(enabled=frozenset(codes)))


def write_nb(tmp_path: Path, name: str, *cells: str) -> Path:
    path = tmp_path / name
    path.write_text(notebook_from_cells(list(cells)), encoding="utf-8")
    return path


LEAK_CELLS = (
    "import torch\nimport torch.nn as nn\nmodel = nn.Linear(4, 1).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)",
    "total = 0\nfor i in range(1000):\n    loss = model(torch.randn(2, 4).cuda()).mean()\n    loss.backward()\n"
    "    opt.step()\n    opt.zero_grad()\n    total += loss",
)


# -- masking ---------------------------------------------------------------------------
@pytest.mark.parametrize("line", ["%matplotlib inline", "!pip install torch", "files = !ls -1", "t = %timeit -o f()",
                                  "?torch.randn", "torch.randn?", "torch.randn??", "%timeit -n 10 f(x)",
                                  "a, b = !echo 1 2"])
def test_ipython_lines_are_masked_keeping_lines(line):
    masked, lines, magic = mask_cell(["import torch", line, "x = 1"])
    assert masked == ["import torch", "pass", "x = 1"]
    assert lines == {2} and magic is None


def test_magic_in_a_block_keeps_the_block_valid():
    masked, lines, _ = mask_cell(["for i in range(3):", "    %time f(i)", "    !echo \\", "        continued"])
    assert masked == ["for i in range(3):", "    _ =   f(i)", "    pass", ""]
    assert lines == {2, 3, 4}
    compile("\n".join(masked), "cell", "exec")


def test_timed_code_is_analysed_at_its_own_columns(tmp_path):
    """`%time train(...)` runs `train(...)` in the kernel: it stays code (a call
    site with its arguments), at the columns it has in the cell."""
    masked, lines, _ = mask_cell(["%time y = f(x)", "%prun g()", "%time for i in x: pass"])
    assert masked == ["_ =   y = f(x)", "_ =   g()", "pass"]
    assert masked[0].index("y = f(x)") == "%time y = f(x)".index("y = f(x)")
    cells = ("import torch\nimport torch.nn as nn\n"
             "def evaluate(model, criterion, loader):\n    model.eval()\n    for x, y in loader:\n"
             "        with torch.no_grad():\n            out = model(x)\n        loss = criterion(out, y)\n",
             "net = nn.Linear(4, 2).cuda()\ncriterion = nn.CrossEntropyLoss()\n%time evaluate(net, criterion, loader)")
    # the loss module is known from the timed call: no graph of its own, no MEM104
    result = lint_nb(str(write_nb(tmp_path, "timed.ipynb", *cells)), notebook_from_cells(list(cells)), {"MEM104"})
    assert not result.diagnostics


def test_python_that_looks_like_ipython_is_left_alone():
    source = ['x = (a', '     % b)', 'doc = """', 'What is it?', '!not a shell line', '"""', 'y = x != 3',
              's = "why?"  # really?', "z = 1 % 2"]
    masked, lines, _ = mask_cell(source)
    assert masked == source and not lines


def test_cell_magics():
    masked, lines, magic = mask_cell(["%%bash", "echo hi", "ls"])
    assert magic == "bash" and masked == ["", "", ""] and lines == {1, 2, 3}
    masked, lines, magic = mask_cell(["%%time", "x = f()", "x"])
    assert magic == "time" and masked == ["", "x = f()", "x"] and lines == {1}


def test_magics_are_not_syntax_errors_and_cells_share_names(tmp_path):
    path = write_nb(tmp_path, "nb.ipynb", "%matplotlib inline\n" + LEAK_CELLS[0], "!nvidia-smi\n" + LEAK_CELLS[1],
                    "%%bash\nfor x in 1 2; do echo $x; done")
    result = lint_source(str(path), path.read_bytes(), LintOptions(enabled=ALL))
    assert result.error is None
    assert not [d for d in result.diagnostics if d.code == "MEM001"]
    # the model defined in cell 2 is known in cell 3: the accumulation is found there
    mem101 = [d for d in result.diagnostics if d.code == "MEM101"]
    assert [(d.cell, d.line, d.col) for d in mem101] == [(3, 8, 5)]


def test_syntax_error_is_reported_in_its_cell(tmp_path):
    path = write_nb(tmp_path, "nb.ipynb", "import torch", "x = (1,\ny = 2 +")
    result = lint_source(str(path), path.read_bytes(), LintOptions(enabled=ALL))
    errors = [d for d in result.diagnostics if d.code == "MEM001"]
    assert errors and errors[0].cell == 3


def test_cells_that_do_not_parse_leave_the_others_linted(tmp_path):
    """A course notebook's exercise blanks (`criterion = `) break their own
    cells only: each is a MEM001 in its cell, the other cells are linted
    (Jupyter compiles every cell on its own), and no fix is offered on a
    notebook CPython cannot parse whole."""
    path = write_nb(tmp_path, "exercise.ipynb", LEAK_CELLS[0], "criterion = ", LEAK_CELLS[1], "print(total")
    result = lint_source(str(path), path.read_bytes(), LintOptions(enabled=ALL))
    errors = [d.cell for d in result.diagnostics if d.code == "MEM001"]
    assert errors == [3, 5]  # notebook_from_cells puts a markdown cell first
    mem101 = [d for d in result.diagnostics if d.code == "MEM101"]
    assert [(d.cell, d.line) for d in mem101] == [(4, 7)]
    assert all(d.fix is None for d in result.diagnostics)


@pytest.mark.parametrize(("broken", "words"), [
    ("for x in loader:\n    # YOUR CODE HERE", "expected an indented block after 'for' statement on line 1"),
    ('notes = """start of a string', "unterminated triple-quoted string"),
    ("@torch.no_grad()", "invalid syntax"),
    ("x = \\", "unexpected EOF"),
    ("y = " + "(" * 300 + "1" + ")" * 300, "too many nested parentheses"),
    ("z = 1\x00", "null bytes"),
])
def test_a_cell_is_broken_when_it_does_not_compile_alone(tmp_path, broken, words):
    """Jupyter compiles each cell by itself: the cell that fails alone is
    the one reported (not the next cell, where CPython's error on the whole
    module would land), with line numbers of its own, and the cells after
    it are linted."""
    path = write_nb(tmp_path, "exercise.ipynb", LEAK_CELLS[0], broken, LEAK_CELLS[1])
    result = lint_source(str(path), path.read_bytes(), LintOptions(enabled=ALL))
    errors = [d for d in result.diagnostics if d.code == "MEM001"]
    assert [d.cell for d in errors] == [3] and words in errors[0].message
    assert [d.cell for d in result.diagnostics if d.code == "MEM101"] == [4]


def test_a_string_split_across_cells_breaks_both_halves(tmp_path):
    path = write_nb(tmp_path, "split.ipynb", LEAK_CELLS[0], '"""opened here', LEAK_CELLS[1], 'closed here"""')
    result = lint_source(str(path), path.read_bytes(), LintOptions(enabled=ALL))
    assert [d.cell for d in result.diagnostics if d.code == "MEM001"] == [3, 5]
    assert [d.cell for d in result.diagnostics if d.code == "MEM101"] == [4]


def test_a_whole_notebook_that_parses_keeps_its_fixes(tmp_path):
    path = write_nb(tmp_path, "exercise.ipynb", *LEAK_CELLS)
    result = lint_source(str(path), path.read_bytes(), LintOptions(enabled=ALL))
    assert not [d for d in result.diagnostics if d.code == "MEM001"]
    assert any(d.fix is not None for d in result.diagnostics if d.code == "MEM101")


# -- bad notebooks --------------------------------------------------------------------
@pytest.mark.parametrize(("content", "words"), [
    ("{", "bad JSON"),
    ('{"nbformat": 3, "worksheets": []}', "nbformat 3"),
    ("[1, 2]", "not an object"),
    ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": {}}', "'cells' is not a list"),
    ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"source": "x"}]}', "no cell_type"),
    ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", "source": 3}]}', "not text"),
])
def test_malformed_notebook_is_one_line_error(content, words):
    with pytest.raises(NotebookError) as caught:
        load("bad.ipynb", content.encode())
    message = str(caught.value)
    assert message.startswith("bad.ipynb: not a valid notebook") and words in message and "\n" not in message


def test_malformed_notebook_does_not_stop_the_run(tmp_path):
    (tmp_path / "bad.ipynb").write_text("{not json")
    (tmp_path / "v3.ipynb").write_text('{"nbformat": 3, "worksheets": []}')
    write_nb(tmp_path, "good.ipynb", *LEAK_CELLS)
    proc = run_memlint("--no-cache", "--format", "concise", str(tmp_path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("memlint: error:")]
    assert len(errors) == 2 and all("not a valid notebook" in line for line in errors)
    assert any("bad.ipynb" in line for line in errors) and any("v3.ipynb" in line for line in errors)
    assert "good.ipynb:cell 3:7:5: MEM101" in proc.stdout


def test_other_kernel_languages_are_skipped_with_a_note(tmp_path):
    document = json.loads(notebook_from_cells(["x <- 1"]))
    document["metadata"] = {"kernelspec": {"language": "R", "name": "ir"}, "language_info": {"name": "R"}}
    path = tmp_path / "r.ipynb"
    path.write_text(json.dumps(document))
    proc = run_memlint("--no-cache", str(path))
    assert proc.returncode == 0 and "not a Python notebook" in proc.stderr


# -- positions in every format --------------------------------------------------------
def test_cell_numbers_count_every_cell():
    result = lint_source(str(TRAIN), TRAIN.read_bytes(), LintOptions(enabled=ALL))
    found = {(d.code, d.cell, d.line) for d in result.diagnostics}
    # cell 1 and 4 are markdown, cell 10 raw: counted all the same
    assert ("MEM113", 6, 1) in found and ("MEM113", 7, 1) in found
    assert ("MEM114", 5, 3) in found and ("MEM101", 5, 10) in found and ("MEM404", 12, 2) in found
    assert not [d for d in result.diagnostics if d.code == "MEM001"]


def test_concise_full_and_github_name_the_cell(tmp_path):
    path = write_nb(tmp_path, "nb.ipynb", *LEAK_CELLS)
    concise = run_memlint("--no-cache", "--format", "concise", str(path)).stdout
    assert f"{path}:cell 3:7:5: MEM101 " in concise
    full = run_memlint("--no-cache", "--format", "full", str(path)).stdout
    assert f"{path}:cell 3:7:5: MEM101 [error]" in full
    assert "7 |     total += loss" in full  # the snippet is the cell's line
    github = run_memlint("--no-cache", "--format", "github", str(path)).stdout
    line = next(text for text in github.splitlines() if "MEM101" in text)
    assert line.startswith("::error file=") and "line=" not in line and "::cell 3:7:5: " in line


def test_json_has_cells_and_validates(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    path = write_nb(tmp_path, "nb.ipynb", *LEAK_CELLS)
    script = tmp_path / "train.py"
    script.write_text("import torch; torch.cuda.init()\n\ndef f(p):\n    return torch.load(p)\n")
    proc = run_memlint("--no-cache", "--format", "json", str(tmp_path))
    document = json.loads(proc.stdout)
    schema = json.loads((REPO / "docs" / "schemas" / "memlint-json-v1.schema.json").read_text())
    jsonschema.validate(document, schema)
    by_path = {}
    for d in document["diagnostics"]:
        by_path.setdefault(Path(d["path"]).name, []).append(d)
    mem101 = next(d for d in by_path["nb.ipynb"] if d["code"] == "MEM101")
    assert (mem101["cell"], mem101["start_line"], mem101["start_col"]) == (3, 7, 5)
    assert mem101["fix"]["edits"][0]["cell"] == 3
    assert all(d["cell"] is None for d in by_path["train.py"])


def test_sarif_names_the_cell(tmp_path):
    path = write_nb(tmp_path, "nb.ipynb", *LEAK_CELLS)
    document = json.loads(run_memlint("--no-cache", "--format", "sarif", str(path), cwd=tmp_path).stdout)
    result = next(r for r in document["runs"][0]["results"] if r["ruleId"] == "MEM101")
    location = result["locations"][0]
    assert location["properties"] == {"cell": 3}
    assert location["physicalLocation"]["region"]["startLine"] == 7
    assert location["logicalLocations"][0]["name"] == "cell 3"
    assert "fixes" not in result


# -- directories, configuration, directives ------------------------------------------
def test_directory_walk_picks_up_notebooks_and_config_applies(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.memlint]\nexclude = ["skipped"]\n[tool.memlint.per-file-ignores]\n"quiet.ipynb" = ["MEM101"]\n')
    write_nb(tmp_path, "loud.ipynb", *LEAK_CELLS)
    write_nb(tmp_path, "quiet.ipynb", *LEAK_CELLS)
    (tmp_path / "skipped").mkdir()
    write_nb(tmp_path / "skipped", "other.ipynb", *LEAK_CELLS)
    proc = run_memlint("--no-cache", "--format", "concise", str(tmp_path), cwd=tmp_path)
    mem101 = [line for line in proc.stdout.splitlines() if " MEM101 " in line]
    assert len(mem101) == 1 and "loud.ipynb:cell 3:" in mem101[0]
    assert "other.ipynb" not in proc.stdout


def test_noqa_and_skip_file_in_cells(tmp_path):
    quiet = LEAK_CELLS[1].replace("total += loss", "total += loss  # noqa: MEM101")
    path = write_nb(tmp_path, "nb.ipynb", LEAK_CELLS[0], quiet)
    result = lint_source(str(path), path.read_bytes(), LintOptions(enabled=ALL))
    assert not [d for d in result.diagnostics if d.code == "MEM101"]
    ignored = LEAK_CELLS[1].replace("total += loss", "total += loss  # memlint: ignore[MEM101]")
    path = write_nb(tmp_path, "nb2.ipynb", LEAK_CELLS[0], ignored)
    result = lint_source(str(path), path.read_bytes(), LintOptions(enabled=ALL))
    assert not [d for d in result.diagnostics if d.code == "MEM101"]
    path = write_nb(tmp_path, "nb3.ipynb", "# memlint: skip-file\n" + LEAK_CELLS[0], LEAK_CELLS[1])
    assert not lint_source(str(path), path.read_bytes(), LintOptions(enabled=ALL)).diagnostics


def test_notebook_rules_run_on_notebooks_only(tmp_path):
    source = "import torch\nimport torch.nn as nn\nmodel = nn.Linear(2, 1)\nloss = model(torch.ones(1, 2)).sum()\nloss\n"
    as_script = lint_source("script.py", source.encode(), LintOptions(enabled=ALL)).diagnostics
    assert not [d for d in as_script if d.code in ("MEM113", "MEM114", "MEM404")]
    as_notebook = lint_nb("nb.ipynb", notebook_from_cells([source])).diagnostics
    assert [d.code for d in as_notebook if d.code == "MEM113"] == ["MEM113"]


def test_cache_keys_notebooks_apart_and_round_trips_cells(tmp_path):
    from argparse import Namespace

    from memlint.config import load_config
    from memlint.lint import cache
    from memlint.lint.runner import Job, options_for

    path = write_nb(tmp_path, "nb.ipynb", *LEAK_CELLS)
    twin = tmp_path / "nb.py"
    twin.write_bytes(path.read_bytes())
    config = load_config(None, tmp_path)
    options = options_for(str(path), ALL, config)
    assert cache.entry_key(Job(str(path), options), b"x") != cache.entry_key(Job(str(twin), options), b"x")
    args = Namespace(cache_dir=str(tmp_path / "cache"), jobs=1)
    jobs = [Job(str(path), options)]
    first = cache.lint_jobs_cached(jobs, args, config)[0]
    second = cache.lint_jobs_cached(jobs, args, config)[0]
    assert first.diagnostics and second.diagnostics == first.diagnostics
    assert {d.cell for d in second.diagnostics} == {3}


def test_lint_path_imports_neither_nbformat_nor_pygls():
    code = ("import sys\nfrom memlint.cli import main\nmain(['--no-cache', '--exit-zero', sys.argv[1]])\n"
            "print('IMPORTED', sorted(m for m in ('nbformat', 'pygls', 'libcst', 'torch') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code, str(TRAIN)], capture_output=True, text=True, timeout=120)
    assert "IMPORTED []" in proc.stdout, proc.stdout + proc.stderr


# -- fixes ------------------------------------------------------------------------------
def _cells_except_sources(document: dict) -> dict:
    copy = json.loads(json.dumps(document))
    for cell in copy["cells"]:
        cell.pop("source", None)
    return copy


def test_fix_rewrites_only_the_changed_cell_byte_for_byte(tmp_path):
    path = tmp_path / "train.ipynb"
    shutil.copy(TRAIN, path)
    before = path.read_text(encoding="utf-8")
    proc = run_memlint("--no-cache", "--fix", "--unsafe-fixes", str(path))
    assert "Fixed" in proc.stderr, proc.stderr
    after = path.read_text(encoding="utf-8")
    assert after != before
    old, new = json.loads(before), json.loads(after)
    assert _cells_except_sources(old) == _cells_except_sources(new)  # outputs, counts, metadata, ids
    changed = [i for i, (a, b) in enumerate(zip(old["cells"], new["cells"])) if a["source"] != b["source"]]
    assert 4 in changed and set(changed) <= {4, 5, 6}
    assert "running += loss.detach()" in "".join(new["cells"][4]["source"])
    # byte-identical outside the changed cells' source values
    old_spans, new_spans = source_spans(before), source_spans(after)
    pieces_old, pieces_new, last_old, last_new = [], [], 0, 0
    for index in changed:
        pieces_old.append(before[last_old:old_spans[index][0]])
        pieces_new.append(after[last_new:new_spans[index][0]])
        last_old, last_new = old_spans[index][1], new_spans[index][1]
    assert pieces_old == pieces_new and before[last_old:] == after[last_new:]
    # inside the changed values too, the file is as Jupyter (nbformat) writes it, as it was before
    import nbformat

    def canonical(text: str) -> str:
        return nbformat.writes(nbformat.reads(text, as_version=4)).rstrip("\n")

    assert canonical(before) == before.rstrip("\n") and canonical(after) == after.rstrip("\n")
    # fixed once, nothing left to fix
    again = run_memlint("--no-cache", "--fix", "--unsafe-fixes", str(path))
    assert "Fixed" not in again.stderr and path.read_text(encoding="utf-8") == after


def test_fix_keeps_other_json_styles(tmp_path):
    document = json.loads(notebook_from_cells(list(LEAK_CELLS)))
    document["cells"][2]["source"] = "# étape 2\n" + "".join(document["cells"][2]["source"])  # one string
    document["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["état ✓\n"]}]
    text = json.dumps(document, indent=4, ensure_ascii=True) + "\n"
    path = tmp_path / "styled.ipynb"
    path.write_text(text, encoding="utf-8")
    proc = run_memlint("--no-cache", "--fix", str(path))
    assert "Fixed 1 problem" in proc.stderr, proc.stderr
    after = path.read_text(encoding="utf-8")
    new = json.loads(after)
    assert isinstance(new["cells"][2]["source"], str) and "total += loss.detach()" in new["cells"][2]["source"]
    assert after.replace("loss.detach()", "loss") == text  # same indentation, same escaping


def test_rewrite_sources_list_style_and_checks():
    text = notebook_from_cells(["a = 1\nb = 2", "c = 3"])
    new = rewrite_sources(text, {1: "a = 10\nb = 2\n"})
    assert json.loads(new)["cells"][1]["source"] == ["a = 10\n", "b = 2\n"]
    assert new.replace('"a = 10\\n",\n    "b = 2\\n"', '"a = 1\\n",\n    "b = 2"') == text
    with pytest.raises(ValueError):
        rewrite_sources(text, {7: "x"})


def test_diff_shows_cells_and_writes_nothing(tmp_path):
    path = write_nb(tmp_path, "nb.ipynb", *LEAK_CELLS)
    before = path.read_bytes()
    proc = run_memlint("--no-cache", "--diff", str(path))
    assert proc.returncode == 1
    assert f"--- a/{path}:cell 3" in proc.stdout or f"--- {path}:cell 3" in proc.stdout
    assert "+    total += loss.detach()" in proc.stdout
    assert path.read_bytes() == before


def test_fix_never_touches_a_masked_line(tmp_path):
    cells = (LEAK_CELLS[0], LEAK_CELLS[1].replace("    total += loss", "    total += loss\n    %time pass"))
    path = write_nb(tmp_path, "nb.ipynb", *cells)
    run_memlint("--no-cache", "--fix", str(path))
    source = "".join(json.loads(path.read_text())["cells"][2]["source"])
    assert "%time pass" in source and "total += loss.detach()" in source


def test_large_outputs_do_not_stop_linting(tmp_path):
    document = json.loads(notebook_from_cells(list(LEAK_CELLS)))
    document["cells"][1]["outputs"] = [{"output_type": "display_data", "metadata": {},
                                        "data": {"image/png": "A" * (3 * 2**20)}}]
    path = tmp_path / "plots.ipynb"
    path.write_text(json.dumps(document))
    proc = run_memlint("--no-cache", "--format", "concise", str(path))
    assert f"{path}:cell 3:7:5: MEM101" in proc.stdout, proc.stderr


def test_stdin_notebook_is_linted_and_fixed_to_stdout(tmp_path):
    text = notebook_from_cells(list(LEAK_CELLS))
    proc = run_memlint("--no-cache", "--format", "concise", "--stdin-filename", "nb.ipynb", "-", stdin=text.encode())
    assert "nb.ipynb:cell 3:7:5: MEM101" in proc.stdout
    fixed = run_memlint("--fix", "--stdin-filename", "nb.ipynb", "-", stdin=text.encode())
    assert json.loads(fixed.stdout)["cells"][2]["source"][-1] == "    total += loss.detach()"
    assert fixed.stdout.replace("loss.detach()", "loss") == text


def test_empty_and_markdown_cells_keep_the_numbering():
    text = notebook_from_cells(["", LEAK_CELLS[0], "", "# just a comment", LEAK_CELLS[1], ""])
    result = lint_nb("nb.ipynb", text)
    assert [(d.cell, d.line) for d in result.diagnostics if d.code == "MEM101"] == [(6, 7)]


def test_percent_cells():
    from memlint.lint.notebook import percent_cells

    assert percent_cells("# %%\na = 1\n# %% [markdown]\nb\n") == [(2, "a = 1"), (4, "b")]
    assert percent_cells("x = 1\n# %%\ny\n") == [(1, "x = 1"), (3, "y")]


def test_rules_json_marks_notebook_only_rules():
    records = {r["code"]: r for r in json.loads(run_memlint("rules", "--format", "json").stdout)}
    assert {code for code, r in records.items() if r["notebook_only"]} == {"MEM113", "MEM114", "MEM404"}


def test_mem113_fix_goes_after_closing_parentheses(tmp_path):
    path = write_nb(tmp_path, "nb.ipynb", LEAK_CELLS[0], "out = model(torch.randn(2, 4).cuda())\n(out  # shown\n)  # done")
    proc = run_memlint("--no-cache", "--fix", "--unsafe-fixes", "--select", "MEM113", str(path))
    assert "Fixed 1 problem" in proc.stderr, proc.stderr
    assert "".join(json.loads(path.read_text())["cells"][2]["source"]).endswith("(out  # shown\n);  # done")


@pytest.mark.parametrize("option", ["--diff", "--fix", "--add-noqa"])
def test_cells_without_ids_print_no_nbformat_warning(tmp_path, option):
    """A 4.5 notebook whose cells have no ``id`` (older Jupyter writers):
    nbformat's MissingIDFieldWarning is not printed as raw text."""
    document = json.loads(notebook_from_cells(["import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt').cuda()\n"]))
    for cell in document["cells"]:
        del cell["id"]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(document))
    extra = "--quiet" if option == "--add-noqa" else "--unsafe-fixes"
    done = run_memlint("--no-cache", option, extra, str(path))
    assert "Warning" not in done.stderr and "nbformat" not in done.stderr, done.stderr
    if option == "--diff":
        assert "Would fix 1 problem" in done.stderr and "map_location" in done.stdout
    else:  # the fix or the noqa was written
        assert path.read_text() != json.dumps(document)


def test_fix_keeps_a_cells_crlf_line_ends(tmp_path):
    """The line a fix adds to a cell saved with CRLF ends in CRLF too."""
    cells = [
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "import torch\r\nmodel = torch.nn.Linear(4, 2).cuda()\r\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\r\n"},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "def train(loader):\r\n    for x in loader:\r\n        loss = model(x.cuda()).sum()\r\n"
                   "        loss.backward()\r\n        opt.step()\r\n"},
    ]
    path = tmp_path / "crlf.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
                                "nbformat": 4, "nbformat_minor": 5}), encoding="utf-8")
    run_memlint("check", "--no-cache", "--fix", "--unsafe-fixes", str(path))
    fixed = json.loads(path.read_text(encoding="utf-8"))["cells"][1]["source"]
    assert "zero_grad()" in fixed and "\n" not in fixed.replace("\r\n", "")
