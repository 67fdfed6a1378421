"""The README's two commands are the ones the project promises to work;
CI (.ci/run) must run exactly the test command."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_starts_with_install_and_main_job_then_tests():
    main_job, tests = _readme_commands()[:2]
    assert "pip install" in main_job and main_job.rstrip().split("&&")[-1].strip().startswith("memlint ")
    assert "pip install" in tests and tests.rstrip().endswith("python -m pytest -q")
    assert '"torch==2.13.0"' in main_job and '"torch==2.13.0"' in tests


def test_ci_runs_the_readme_test_command():
    tests = _readme_commands()[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert tests in ci.splitlines()


def test_main_job_input_is_shipped():
    main_job = _readme_commands()[0]
    arguments = main_job.rsplit("memlint ", 1)[1].split()
    target = next(argument for argument in arguments if not argument.startswith("-"))
    assert (ROOT / target).is_file()


def test_main_job_runs_the_estimate():
    """The main job answers both questions: the lint findings and the estimate."""
    main_job = _readme_commands()[0]
    assert main_job.rsplit("&&", 1)[1].split()[:2] == ["memlint", "--estimate"]


def test_example_output_is_what_memlint_prints():
    """The README's example run: the same findings, positions and message starts."""
    import subprocess
    import sys

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```text\n\$ memlint (\S+)\n(.*?)```", text, re.S)
    target, shown = block.group(1), block.group(2).splitlines()
    proc = subprocess.run([sys.executable, "-m", "memlint", "check", "--no-cache", "--format", "concise", target],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    printed = proc.stdout.splitlines()
    assert len(printed) == len(shown), proc.stdout
    for expected, actual in zip(shown, printed):
        assert actual.startswith(expected.removesuffix("...").rstrip()), (expected, actual)
