"""Helpers: run `memlint` in-process on scripts written to a temporary directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MLP = f"{REPO / 'fixtures/models/mlp.py'}:build"


@pytest.fixture
def memlint_run(capsys, monkeypatch):
    """Call memlint.cli.main(args) from the repository root; returns (exit code, stdout, stderr)."""
    from memlint.cli import main

    monkeypatch.chdir(REPO)

    def run(*args: str):
        code = main([*args, "--no-cache", "--jobs", "1"] if args and args[0] not in ("estimate",) else list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def json_document(out: str) -> dict:
    return json.loads(out)
