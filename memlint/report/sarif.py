"""``sarif``: a SARIF 2.1.0 log for code-scanning services (GitHub code scanning).

One run; ``tool.driver.rules`` lists every registered rule with its
documentation (short/full description, help text and Markdown, help URI,
default level); each result points at its rule by ``ruleId``/``ruleIndex``,
with a region of 1-based lines and columns (``endColumn`` exclusive, as SARIF
defines it; columns count Unicode code points: ``columnKind``) and an
artifact URI relative to the working directory (``uriBaseId`` ``%SRCROOT%``).
Fixes become SARIF ``fixes``; one-line run errors become tool execution
notifications, and ``executionSuccessful`` is false when the run had errors
(exit code 2: :func:`memlint.report.run_failed`); ``run.properties.estimates`` carries the estimates as in the
``json`` format.

Notebooks: a result's ``region`` holds the line and column *in the cell*,
and the cell is named twice: ``locations[0].properties.cell`` (the 1-based
cell number, every cell counted as stored) and a ``logicalLocations`` entry
``{"name": "cell N", "fullyQualifiedName": "path:cell N", "kind":
"notebookCell"}``. SARIF 2.1.0 has no notebook-cell location, and a region
relative to the ``.ipynb`` JSON text would point at its JSON, not the code;
a viewer that ignores the property shows the right file and the cell's
line numbers. Notebook results carry no SARIF ``fixes`` (their regions
would be read against the JSON text); ``memlint --fix`` applies them.

Reference: OASIS SARIF 2.1.0, https://docs.oasis-open.org/sarif/sarif/v2.1.0/sarif-v2.1.0.html
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

from memlint import __version__
from memlint.report.text import valid_document

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
SRCROOT = "%SRCROOT%"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}


def artifact_location(path: str, base: Path | None = None) -> dict:
    """``{"uri", "uriBaseId"}`` relative to ``base`` (the cwd), else an absolute file URI.

    The URI percent-encodes the file name's bytes as the file system has
    them (RFC 3986), so a name that is not valid UTF-8 still has an exact URI.
    """
    base = (base or Path.cwd()).resolve()
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(base)
    except ValueError:
        return {"uri": "file://" + quote(os.fsencode(absolute.as_posix()))}
    return {"uri": quote(os.fsencode(relative.as_posix())), "uriBaseId": SRCROOT}


def region(start_line: int, start_col: int, end_line: int, end_col: int) -> dict:
    return {"startLine": start_line, "startColumn": start_col, "endLine": end_line, "endColumn": end_col}


def rule_descriptor(rule) -> dict:
    """The ``reportingDescriptor`` of one rule class."""
    from memlint.docs_gen import rule_page, section, summary
    from memlint.report.rule_docs import rule_url

    doc = rule.doc()
    why = section(doc, "Why is this bad?")
    return {
        "id": rule.CODE,
        "name": rule.NAME,
        "shortDescription": {"text": rule.MESSAGE.replace("`", "")},
        "fullDescription": {"text": " ".join((summary(rule) + " " + " ".join(why.split())).split())},
        "help": {"text": doc, "markdown": rule_page(rule)},
        "helpUri": rule_url(rule.CODE),
        "defaultConfiguration": {"level": LEVELS[rule.SEVERITY.value], "enabled": rule.DEFAULT_ENABLED},
        "properties": {"tags": ["memory"], "fixable": rule.FIX_TITLE is not None},
    }


def _fix(fix, location: dict) -> dict:
    return {
        "description": {"text": f"{fix.title} ({fix.applicability.value})"},
        "artifactChanges": [
            {
                "artifactLocation": location,
                "replacements": [
                    {
                        "deletedRegion": region(e.start_line, e.start_col, e.end_line, e.end_col),
                        "insertedContent": {"text": e.content},
                    }
                    for e in fix.edits
                ],
            }
        ],
    }


def result(diagnostic, rule_index: dict[str, int], base: Path | None = None) -> dict:
    """The SARIF ``result`` of one finding."""
    location = artifact_location(diagnostic.path, base)
    out = {
        "ruleId": diagnostic.code,
        "level": LEVELS[diagnostic.severity.value],
        "message": {"text": diagnostic.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": location,
                    "region": region(diagnostic.line, diagnostic.col, diagnostic.end_line, diagnostic.end_col),
                }
            }
        ],
    }
    if diagnostic.cell is not None:
        location_entry = out["locations"][0]
        location_entry["properties"] = {"cell": diagnostic.cell}
        location_entry["logicalLocations"] = [{
            "name": f"cell {diagnostic.cell}",
            "fullyQualifiedName": f"{diagnostic.path}:cell {diagnostic.cell}",
            "kind": "notebookCell",
        }]
    if diagnostic.code in rule_index:
        out["ruleIndex"] = rule_index[diagnostic.code]
    if diagnostic.fix is not None and diagnostic.cell is None:
        out["fixes"] = [_fix(diagnostic.fix, location)]
    return out


def document(run, base: Path | None = None) -> dict:
    """The whole SARIF log for ``run``."""
    from memlint.lint.registry import all_rules
    from memlint.report import run_errors, run_failed, run_notes
    from memlint.report.rule_docs import PROJECT_URL

    rules = all_rules()
    rule_index = {rule.CODE: index for index, rule in enumerate(rules)}
    base = (base or Path.cwd()).resolve()
    errors = run_errors(run)
    sarif_run = {
        "tool": {
            "driver": {
                "name": "memlint",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": PROJECT_URL,
                "rules": [rule_descriptor(rule) for rule in rules],
            }
        },
        "originalUriBaseIds": {SRCROOT: {"uri": base.as_uri() + "/"}},
        "columnKind": "unicodeCodePoints",
        "results": [result(d, rule_index, base) for d in run.diagnostics],
        "invocations": [
            {
                "executionSuccessful": not run_failed(run),
                "toolExecutionNotifications": [
                    *({"level": "error", "message": {"text": message}} for message in errors),
                    *({"level": "note", "message": {"text": message}} for message in run_notes(run)),
                ],
            }
        ],
        "properties": {
            "estimates": [e.to_json() if hasattr(e, "to_json") else e for e in run.estimates],
        },
    }
    return {"$schema": SCHEMA_URI, "version": SARIF_VERSION, "runs": [sarif_run]}


def render(run, args, stream) -> None:
    from memlint.lint.fixes import resolve_run

    resolve_run(run)  # each fix's edits, from libcst (loaded only for a file that has a fix)
    json.dump(valid_document(document(run)), stream, indent=2)
    stream.write("\n")
