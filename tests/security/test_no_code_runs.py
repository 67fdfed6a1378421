"""Plain `memlint check` / `memlint PATH` never imports or runs code of the linted tree.

Item 1 of issue 18, and the directives item: whatever the files and the
configuration say -- an estimate comment in a normal, a skip-file or a
docstring-only position, a [tool.memlint.estimate] table, targets such as
os:abort or builtins:input -- no marker appears, in every format, with
--diff and --fix, cached or not.
"""

from __future__ import annotations

import json
import os

import pytest

from .conftest import FORMATS, error_lines, marker_code, run_cli, script_with_target


def hostile_files(marker) -> dict[str, str]:
    planted = marker_code(marker)
    return {
        "evil.py": planted + "def build():\n    " + planted,
        "train.py": script_with_target("evil.py:build"),
        "skipped.py": "# memlint: skip-file\n" + script_with_target("evil.py:build"),
        "in_docstring.py": '"""Notes.\n# memlint: estimate target=evil.py:build\n"""\nimport torch\n',
        "aborts.py": script_with_target("os:abort"),
        "blocks.py": script_with_target("builtins:input"),
        "table_target.py": "import torch\ndef step(loss):\n    loss.backward()\n",
        # shadows of modules memlint imports, found first if the tree were on sys.path
        "rich.py": planted,
        "tomllib.py": planted,
    }


HOSTILE_PYPROJECT = '[project]\nname = "scratch"\n\n[tool.memlint.estimate]\ntarget = "evil.py:build"\n'


@pytest.mark.parametrize("extra", [("check",), (), ("check", "--no-cache"), ("check", "--diff"), ("check", "--fix"),
                                   ("--unsafe-fixes", "--fix")])
def test_no_marker_in_any_format_and_mode(tree, tmp_path, extra):
    marker = tmp_path / "RAN"
    root = tree(hostile_files(marker), pyproject=HOSTILE_PYPROJECT)
    for fmt in FORMATS:
        for _ in range(2):  # the second run is served from the cache
            completed = run_cli(*extra, "--format", fmt, ".", cwd=root, timeout=60)
            assert not marker.exists(), (extra, fmt, completed.stderr)
            assert completed.returncode in (0, 1), (extra, fmt, completed.stderr)
            assert not error_lines(completed), completed.stderr


def test_the_note_says_estimates_are_configured_and_how_to_run_them(tree, tmp_path):
    root = tree(hostile_files(tmp_path / "RAN"), pyproject=HOSTILE_PYPROJECT)
    completed = run_cli("--format", "concise", ".", cwd=root)
    notes = [line for line in completed.stderr.decode().splitlines() if "configured" in line]
    assert notes == ["memlint: estimates are configured for 4 scripts (./aborts.py, ...); they run only on "
                     "request: memlint --estimate PATH..."]
    assert completed.returncode == 1 and b"buggy.py:2:9: MEM303" in completed.stdout


def test_directives_inside_strings_are_text(tree, tmp_path):
    """With --estimate, the docstring's estimate line is not configuration;
    "# noqa" and "# memlint: skip-file" in strings suppress nothing."""
    marker = tmp_path / "RAN"
    root = tree({
        "evil.py": marker_code(marker) + "def build():\n    pass\n",
        "in_docstring.py": '"""Notes.\n# memlint: estimate target=evil.py:build\n"""\nimport torch\n',
        "noqa_in_string.py": "import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt' '# noqa')\n",
        "skip_in_string.py": "import torch; torch.cuda.init()\nTEXT = '# memlint: skip-file'\nstate = torch.load('ckpt.pt')\n",
    })
    completed = run_cli("--estimate", "--format", "json", ".", cwd=root)
    document = json.loads(completed.stdout)
    assert not marker.exists() and document["estimates"] == []
    found = sorted((d["path"], d["code"]) for d in document["diagnostics"])
    assert found == [("./buggy.py", "MEM303"), ("./noqa_in_string.py", "MEM303"), ("./skip_in_string.py", "MEM303")]


def test_real_comments_are_still_directives(tree):
    root = tree({
        "noqa.py": "import torch; torch.cuda.init()\nstate = torch.load('ckpt.pt')  # noqa: MEM303\n",
        "skipped.py": "# memlint: skip-file\nimport torch\nstate = torch.load('ckpt.pt')\n",
    })
    document = json.loads(run_cli("--format", "json", ".", cwd=root).stdout)
    assert [d["path"] for d in document["diagnostics"]] == ["./buggy.py"]


@pytest.mark.parametrize(("target", "expected"), [
    ("os:abort", "module 'os' is not a file of the project"),
    ("builtins:input", "module 'builtins' is not a file of the project"),
    ("/dev/zero:f", "an absolute path"),
    ("../outside.py:build", "is outside the project root"),
    ("data.bin:build", "is not a Python file"),
    ("zero.py:build", "is outside the project root"),  # a symbolic link to /dev/zero
    ("fifo.py:build", "is not a regular file"),
])
def test_targets_resolve_only_inside_the_project(tree, tmp_path, target, expected):
    import os

    marker = tmp_path / "RAN"
    (tmp_path / "outside.py").write_text(marker_code(marker) + "def build():\n    pass\n")
    root = tree({"train.py": script_with_target(target), "data.bin": marker_code(marker)})
    (root / "zero.py").symlink_to("/dev/zero")
    os.mkfifo(root / "fifo.py")
    completed = run_cli("--estimate", "--format", "concise", "train.py", cwd=root, timeout=60)
    [line] = error_lines(completed)
    assert line.startswith(f"memlint: error: train.py: estimate (target {target}) failed: ") and expected in line, line
    assert completed.returncode == 2 and not marker.exists()


def test_a_trusted_target_may_name_an_installed_callable(tree):
    """--estimate-target on the command line lets a configured target name
    code outside the project; here a standard-library callable that is no
    factory, so the estimate fails in its own child, in one line."""
    root = tree({"train.py": script_with_target("json:dumps")})
    completed = run_cli("--estimate", "--estimate-target", "json:dumps", "--format", "concise", "train.py",
                        cwd=root, timeout=120)
    [line] = error_lines(completed)
    assert "train.py: estimate (target json:dumps) failed: " in line and "not a file of the project" not in line
    assert completed.returncode == 2


def test_a_project_file_cannot_stand_in_for_a_standard_library_module(tree, tmp_path):
    """A project os.py makes `os:abort` look like a project target; the
    estimate child imports `os`, finds the standard library's, and refuses
    to call it."""
    root = tree({"os.py": "def abort():\n    pass\n", "train.py": script_with_target("os:abort")})
    completed = run_cli("--estimate", "--format", "concise", "train.py", cwd=root, timeout=120)
    [line] = error_lines(completed)
    assert "module 'os' resolves to " in line and "not the project's" in line and completed.returncode == 2


def test_a_module_target_of_the_project_is_estimated(tree):
    root = tree({
        "pkg/__init__.py": "",
        "pkg/models.py": "import torch\n\ndef build():\n    return torch.nn.Linear(4, 4), torch.zeros(2, 4)\n",
        "train.py": script_with_target("pkg.models:build"),
    })
    completed = run_cli("--estimate", "--format", "json", "train.py", cwd=root, timeout=120)
    [estimate] = json.loads(completed.stdout)["estimates"]
    assert estimate["error"] is None and estimate["estimate"]["device_used"] > 0, completed.stderr


def test_a_huge_file_is_not_read(tree):
    """A sparse 8 GiB `.py` file: skipped by its size, never read into memory."""
    import time

    root = tree({})
    with open(root / "huge.py", "wb") as handle:
        handle.truncate(8 * 2**30)
    started = time.monotonic()
    completed = run_cli("--estimate", "--format", "concise", ".", cwd=root, timeout=60)
    assert time.monotonic() - started < 20
    assert b"./huge.py: skipped: 8192.0 MiB is over the 1 MiB limit for linting" in completed.stderr
    assert completed.stdout.startswith(b"./buggy.py:2:9: MEM303") and completed.returncode == 1


def test_a_trusted_target_file_outside_the_project_is_estimated_and_cached(tree, tmp_path):
    """--estimate-target naming a file beside the project (`../other/m.py:build`):
    the estimate runs and its cache key names the file by its full path (this
    raised a ValueError from the cache once)."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "m.py").write_text("import torch\ndef build(batch_size=2):\n    return torch.nn.Linear(4, 2), torch.zeros(batch_size, 4)\n")
    root = tree({"train.py": script_with_target("../other/m.py:build")})
    target = str(os.path.relpath(other / "m.py", root)) + ":build"
    completed = run_cli("--estimate", "--estimate-target", target, "--format", "concise", "train.py",
                        cwd=root, timeout=180)
    err = completed.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and not error_lines(completed), err
    assert completed.returncode in (0, 1), err
