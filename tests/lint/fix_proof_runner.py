"""Run fixture scripts in one interpreter (torch is imported once) and print
each one's stdout and outcome as JSON: ``{path: {"ok": bool, "stdout": str,
"error": str}}``. A notebook's code cells run in order as one script.

Usage: ``python fix_proof_runner.py SCRIPT...`` (used by test_fix_proofs.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback


def source_of(path: str) -> str:
    if not path.endswith(".ipynb"):
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    with open(path, encoding="utf-8") as handle:
        cells = json.load(handle)["cells"]
    return "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                     for c in cells if c["cell_type"] == "code")


def run(path: str) -> dict:
    out = io.StringIO()
    try:
        code = compile(source_of(path), path, "exec")
        with contextlib.redirect_stdout(out):
            exec(code, {"__name__": "__main__", "__file__": path})
    except BaseException:  # noqa: BLE001 - the outcome is what is reported
        return {"ok": False, "stdout": out.getvalue(), "error": traceback.format_exc(limit=3)}
    return {"ok": True, "stdout": out.getvalue(), "error": ""}


if __name__ == "__main__":
    json.dump({path: run(path) for path in sys.argv[1:]}, sys.stdout)
