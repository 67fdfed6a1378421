"""Output formats: full, github, sarif, json (schema-validated), concise."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import jsonschema
import pytest

from memlint.check import CheckRun
from memlint.lint.diagnostic import Applicability, Diagnostic, Edit, FileResult, Fix, Severity
from memlint.report import full, github, json_format, sarif

from .expectations import lint_text
from .helpers import run_memlint

REPO = Path(__file__).resolve().parents[2]
BUGGY = "import torch; torch.cuda.init()\n\ndef resume(path):\n    state = torch.load(path)\n    return state.cuda()\n"
UNSAFE_FIX = Fix("Add `map_location`", Applicability.UNSAFE, (Edit(4, 13, 4, 29, "torch.load(path, map_location='cpu')"),))


def _args(**overrides) -> argparse.Namespace:
    values = dict(format=None, statistics=False, unsafe_fixes=False, fix=False, diff=False)
    values.update(overrides)
    return argparse.Namespace(**values)


def _diagnostic(path: str, severity=Severity.WARNING, message="m", fix=None, line=4, col=13, end_line=4, end_col=29):
    return Diagnostic("MEM303", "load-without-map-location", severity, message, path, line, col, end_line, end_col, fix)


def _run_for(path: Path, source: str) -> CheckRun:
    path.write_text(source, encoding="utf-8")
    return CheckRun(results=[FileResult(path=str(path), diagnostics=lint_text(path, source, {"MEM303"}), parsed=True)])


def _render(module, run, **args) -> str:
    stream = io.StringIO()
    module.render(run, _args(**args), stream)
    return stream.getvalue()


# --- full -------------------------------------------------------------------


def test_full_shows_location_code_severity_source_and_caret(tmp_path):
    path = tmp_path / "train.py"
    run = _run_for(path, BUGGY)
    out = _render(full, run).splitlines()
    diagnostic = run.diagnostics[0]
    assert out[0].startswith(f"{path}:4:13: MEM303 [warning] `torch.load` without")
    assert out[1] == "4 |     state = torch.load(path)"
    caret_line = out[2]
    assert caret_line.index("^") == out[1].index("torch.load")
    assert caret_line.count("^") == diagnostic.end_col - diagnostic.col
    assert "unsafe fix available with --unsafe-fixes" in out[3]
    assert out[-1] == "Found 1 finding (0 fixable with --fix, 1 more with --unsafe-fixes)"


def test_full_marks_fixable_with_unsafe_fixes_and_counts(tmp_path):
    path = tmp_path / "train.py"
    run = _run_for(path, BUGGY + BUGGY.replace("resume", "again"))
    out = _render(full, run, unsafe_fixes=True)
    assert out.count("[*] fixable") == 2
    assert out.rstrip().endswith("Found 2 findings (2 fixable with --fix)")


def test_full_caret_aligns_after_tabs_and_wide_characters(tmp_path):
    path = tmp_path / "wide.py"
    source = "import torch; torch.cuda.init()\nif True:\n\tx = '漢字'; y = torch.load(p)\n"
    run = _run_for(path, source)
    assert [d.code for d in run.diagnostics] == ["MEM303"]
    lines = _render(full, run).splitlines()
    from rich.cells import cell_len

    source_line, caret_line = lines[1], lines[2]
    assert "\t" not in source_line  # tabs expanded in the snippet, so the caret can line up
    start = source_line.index("torch.load")
    assert cell_len(caret_line[: caret_line.index("^")]) == cell_len(source_line[:start])
    assert caret_line.count("^") == len("torch.load(p)")


def test_full_multiline_span_underlines_to_end_of_first_line(tmp_path):
    path = tmp_path / "multi.py"
    run = _run_for(path, "import torch; torch.cuda.init()\nstate = torch.load(\n    path,\n)\n")
    lines = _render(full, run).splitlines()
    assert lines[1] == "2 | state = torch.load("
    assert lines[2].count("^") == len("torch.load(")


def test_full_without_findings_and_unreadable_source():
    run = CheckRun(results=[FileResult(path="gone.py", diagnostics=[_diagnostic("gone.py")])])
    out = _render(full, run)
    assert "gone.py:4:13: MEM303" in out and " | " not in out  # no snippet, no crash
    assert _render(full, CheckRun()).strip() == "All checks passed!"


def test_full_does_not_interpret_markup_in_messages(tmp_path):
    run = CheckRun(results=[FileResult(path="x.py", diagnostics=[_diagnostic("x.py", message="[bold]x[/bold] [red]")])])
    assert "[bold]x[/bold] [red]" in _render(full, run)


# --- github -----------------------------------------------------------------


def test_github_escapes_data_and_properties_like_the_toolkit():
    message = "100% of a:b, c\r\nnext line"
    path = "dir,with:odd%name.py"
    run = CheckRun(results=[FileResult(path=path, diagnostics=[_diagnostic(path, message=message)])])
    line = _render(github, run).strip()
    assert line == (
        "::warning file=dir%2Cwith%3Aodd%25name.py,line=4,col=13,endLine=4,endColumn=29,"
        "title=MEM303 load-without-map-location::100%25 of a:b, c%0D%0Anext line"
    )


@pytest.mark.parametrize(
    ("severity", "command"), [(Severity.ERROR, "::error "), (Severity.WARNING, "::warning "), (Severity.INFO, "::notice ")]
)
def test_github_command_per_severity(severity, command):
    run = CheckRun(results=[FileResult(path="a.py", diagnostics=[_diagnostic("a.py", severity=severity)])])
    assert _render(github, run).startswith(command)


def test_github_escape_round_trip():
    original = "a%b:c,d\re\nf%0A"
    escaped = github.escape_property(original)
    assert not any(ch in escaped for ch in ":,\r\n")
    decoded = escaped.replace("%2C", ",").replace("%3A", ":").replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")
    assert decoded == original


def test_github_reports_run_errors_as_annotations():
    run = CheckRun(errors=["missing.py: no such file or directory"])
    line = _render(github, run).strip()
    assert line.startswith("::error title=memlint::") and line.endswith("missing.py: no such file or directory")


# --- sarif ------------------------------------------------------------------

#: The parts of the SARIF 2.1.0 schema (OASIS sarif-schema-2.1.0.json) that
#: memlint's output uses, with the schema's own required properties, types and
#: enums. No installable package ships the official schema file, so this test
#: keeps the subset; extra properties stay allowed, as in the official schema.
SARIF_SUBSET_SCHEMA = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "$schema": {"type": "string", "format": "uri"},
        "version": {"enum": ["2.1.0"]},
        "runs": {"type": "array", "items": {"$ref": "#/definitions/run"}},
    },
    "definitions": {
        "message": {"type": "object", "anyOf": [{"required": ["text"]}, {"required": ["id"]}],
                    "properties": {"text": {"type": "string"}, "markdown": {"type": "string"}}},
        "mfMessage": {"type": "object", "required": ["text"],
                      "properties": {"text": {"type": "string"}, "markdown": {"type": "string"}}},
        "region": {
            "type": "object",
            "properties": {k: {"type": "integer", "minimum": 1} for k in ("startLine", "startColumn", "endLine", "endColumn")},
        },
        "artifactLocation": {"type": "object", "properties": {"uri": {"type": "string", "format": "uri-reference"},
                                                               "uriBaseId": {"type": "string"}}},
        "level": {"enum": ["none", "note", "warning", "error"]},
        "reportingDescriptor": {
            "type": "object",
            "required": ["id"],
            "properties": {
                "id": {"type": "string"},
                "name": {"type": "string"},
                "shortDescription": {"$ref": "#/definitions/mfMessage"},
                "fullDescription": {"$ref": "#/definitions/mfMessage"},
                "help": {"$ref": "#/definitions/mfMessage"},
                "helpUri": {"type": "string", "format": "uri"},
                "defaultConfiguration": {"type": "object", "properties": {"level": {"$ref": "#/definitions/level"},
                                                                           "enabled": {"type": "boolean"}}},
            },
        },
        "replacement": {"type": "object", "required": ["deletedRegion"],
                        "properties": {"deletedRegion": {"$ref": "#/definitions/region"},
                                       "insertedContent": {"type": "object", "properties": {"text": {"type": "string"}}}}},
        "fix": {"type": "object", "required": ["artifactChanges"], "properties": {
            "description": {"$ref": "#/definitions/message"},
            "artifactChanges": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["artifactLocation", "replacements"],
                "properties": {"artifactLocation": {"$ref": "#/definitions/artifactLocation"},
                               "replacements": {"type": "array", "minItems": 1, "items": {"$ref": "#/definitions/replacement"}}}}}}},
        "result": {
            "type": "object",
            "required": ["message"],
            "properties": {
                "ruleId": {"type": "string"},
                "ruleIndex": {"type": "integer", "minimum": -1},
                "level": {"$ref": "#/definitions/level"},
                "message": {"$ref": "#/definitions/message"},
                "locations": {"type": "array", "items": {"type": "object", "properties": {"physicalLocation": {
                    "type": "object", "properties": {"artifactLocation": {"$ref": "#/definitions/artifactLocation"},
                                                     "region": {"$ref": "#/definitions/region"}}}}}},
                "fixes": {"type": "array", "items": {"$ref": "#/definitions/fix"}},
            },
        },
        "run": {
            "type": "object",
            "required": ["tool"],
            "properties": {
                "tool": {"type": "object", "required": ["driver"], "properties": {"driver": {
                    "type": "object", "required": ["name"],
                    "properties": {"name": {"type": "string"}, "version": {"type": "string"},
                                   "informationUri": {"type": "string", "format": "uri"},
                                   "rules": {"type": "array", "items": {"$ref": "#/definitions/reportingDescriptor"}}}}}},
                "results": {"type": "array", "items": {"$ref": "#/definitions/result"}},
                "columnKind": {"enum": ["utf16CodeUnits", "unicodeCodePoints"]},
                "originalUriBaseIds": {"type": "object", "additionalProperties": {"$ref": "#/definitions/artifactLocation"}},
                "invocations": {"type": "array", "items": {"type": "object", "required": ["executionSuccessful"],
                                                          "properties": {"executionSuccessful": {"type": "boolean"}}}},
                "properties": {"type": "object"},
            },
        },
    },
}


def _sarif_for(tmp_path, monkeypatch, **args):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "src" / "train.py"
    path.parent.mkdir()
    run = _run_for(path, BUGGY)
    run.estimates = [{"peak_allocated": 123}]
    return json.loads(_render(sarif, run, **args)), run


def test_sarif_validates_and_describes_rules(tmp_path, monkeypatch):
    from memlint.lint.registry import all_rules

    document, run = _sarif_for(tmp_path, monkeypatch)
    jsonschema.validate(document, SARIF_SUBSET_SCHEMA, format_checker=jsonschema.FormatChecker())
    assert document["version"] == "2.1.0" and document["$schema"].endswith("sarif-2.1.0.json")
    driver = document["runs"][0]["tool"]["driver"]
    assert driver["name"] == "memlint" and driver["version"]
    codes = [rule["id"] for rule in driver["rules"]]
    assert codes == [rule.CODE for rule in all_rules()]
    for descriptor, rule in zip(driver["rules"], all_rules()):
        assert descriptor["name"] == rule.NAME
        assert descriptor["help"]["text"] == rule.doc()
        assert "## What it does" in descriptor["help"]["markdown"]
        assert descriptor["helpUri"].endswith(f"{rule.CODE}.md")
        expected_level = {"error": "error", "warning": "warning", "info": "note"}[rule.SEVERITY.value]
        assert descriptor["defaultConfiguration"]["level"] == expected_level
    assert document["runs"][0]["properties"]["estimates"] == [{"peak_allocated": 123}]


def test_sarif_result_points_at_relative_uri_and_region(tmp_path, monkeypatch):
    document, run = _sarif_for(tmp_path, monkeypatch)
    sarif_run = document["runs"][0]
    (result,) = sarif_run["results"]
    diagnostic = run.diagnostics[0]
    assert sarif_run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == result["ruleId"] == "MEM303"
    assert result["level"] == "warning" and result["message"]["text"] == diagnostic.message
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 4, "startColumn": diagnostic.col, "endLine": 4, "endColumn": diagnostic.end_col}
    assert sarif_run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    replacement = result["fixes"][0]["artifactChanges"][0]["replacements"][0]
    # the fix engine's edit: only the characters that change (an insertion before the call's ")")
    assert replacement["insertedContent"]["text"] == ', map_location="cpu"'
    assert replacement["deletedRegion"]["startColumn"] == replacement["deletedRegion"]["endColumn"] == diagnostic.end_col - 1


def test_sarif_path_outside_cwd_is_absolute_uri(tmp_path, monkeypatch):
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    location = sarif.artifact_location(str(tmp_path / "other dir" / "a.py"))
    assert location == {"uri": (tmp_path / "other dir" / "a.py").as_uri()}
    assert sarif.artifact_location("sub dir/a b.py")["uri"] == "sub%20dir/a%20b.py"


def test_sarif_run_errors_and_notes_are_notifications(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = CheckRun(errors=["x.py: no such file or directory"], notes=["no Python files to check"])
    document = json.loads(_render(sarif, run))
    invocation = document["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert [(n["level"], n["message"]["text"]) for n in invocation["toolExecutionNotifications"]] == [
        ("error", "x.py: no such file or directory"), ("note", "no Python files to check")]
    jsonschema.validate(document, SARIF_SUBSET_SCHEMA)


# --- json -------------------------------------------------------------------


def _json_schema() -> dict:
    return json.loads((REPO / "docs" / "schemas" / "memlint-json-v1.schema.json").read_text())


def test_json_output_validates_against_documented_schema(tmp_path):
    path = tmp_path / "train.py"
    run = _run_for(path, BUGGY)
    run.results.append(FileResult(path="bad.py", error="bad.py: cannot read file (Permission denied)"))
    run.results.append(FileResult(path="big.py", note="big.py: skipped: 5.0 MiB is over the 1 MiB limit for linting"))
    document = json.loads(_render(json_format, run))
    jsonschema.Draft202012Validator.check_schema(_json_schema())
    jsonschema.validate(document, _json_schema())
    (diagnostic,) = document["diagnostics"]
    assert diagnostic["code"] == "MEM303" and diagnostic["fix"]["applicability"] == "unsafe"
    assert document["summary"] == {"files": 3, "diagnostics": 1, "by_severity": {"warning": 1}}
    assert document["errors"] == ["bad.py: cannot read file (Permission denied)"]
    assert document["notes"] == ["big.py: skipped: 5.0 MiB is over the 1 MiB limit for linting"]


def test_json_schema_rejects_a_broken_document(tmp_path):
    document = json.loads(_render(json_format, _run_for(tmp_path / "t.py", BUGGY)))
    document["diagnostics"][0]["severity"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, _json_schema())


def test_json_schema_is_documented():
    text = (REPO / "docs" / "output-formats.md").read_text()
    assert "schemas/memlint-json-v1.schema.json" in text
    for key in _json_schema()["properties"]:
        assert f"`{key}`" in text, key


def test_full_snippet_counts_lines_as_python_does(tmp_path):
    """A form feed or U+2028 inside a string is no line break for CPython,
    so the snippet under a finding is the finding's own line."""
    path = tmp_path / "sep.py"
    path.write_text('import torch\nnote = "a\x0cb\u2028c"\nstate = torch.load("x.pt")\nstate["w"].cuda()\n', encoding="utf-8")
    out = run_memlint("check", "--no-cache", "--format", "full", str(path)).stdout
    assert '3 | state = torch.load("x.pt")' in out
