"""``memlint rule CODE`` and ``memlint rules``: rule documentation in the terminal.

``print_rule`` renders a rule's page (the same Markdown as docs/rules/CODE.md)
with rich; ``print_rule_table`` lists every rule as a table or as JSON.
"""

from __future__ import annotations

import json
import sys

from memlint.errors import UsageError
from memlint.lint.registry import all_rules
from memlint.lint.rule import Rule

#: Where the project and its rule pages live (SARIF informationUri/helpUri).
PROJECT_URL = "https://github.com/memlint/memlint"


def rule_url(code: str) -> str:
    """The web address of a rule's page (docs/rules/CODE.md in the repository)."""
    return f"{PROJECT_URL}/blob/main/docs/rules/{code}.md"


def find_rule(code_or_name: str) -> type[Rule]:
    """The rule with this code (case-insensitive) or kebab-case name.

    Raises:
        UsageError: no rule has that code or name.
    """
    wanted = code_or_name.strip()
    for rule in all_rules():
        if rule.CODE == wanted.upper() or rule.NAME == wanted.lower():
            return rule
    raise UsageError(f"unknown rule {code_or_name!r} (see `memlint rules`)")


def rule_record(rule: type[Rule]) -> dict:
    """A rule's metadata as plain JSON values."""
    return {
        "code": rule.CODE,
        "name": rule.NAME,
        "severity": rule.SEVERITY.value,
        "default_enabled": rule.DEFAULT_ENABLED,
        "fixable": rule.FIX_TITLE is not None,
        "fix_title": rule.FIX_TITLE,
        "fix_applicability": rule.FIX_APPLICABILITY.value if rule.FIX_TITLE else None,
        "message": rule.MESSAGE,
        "notebook_only": bool(getattr(rule, "NOTEBOOK_ONLY", False)),
        "url": rule_url(rule.CODE),
    }


def print_rule(code: str, stream=None) -> int:
    """Print the page of rule ``code``: rendered on a terminal, the plain
    Markdown source when piped or redirected (as ruff does); returns the
    exit code (0).

    Raises:
        UsageError: unknown code (the CLI prints one line and exits 2).
    """
    from rich.console import Console

    from memlint.docs_gen import rule_page

    rule = find_rule(code)
    stream = stream or sys.stdout
    page = "\n".join(line for line in rule_page(rule).splitlines() if not line.startswith("<!--"))
    console = Console(file=stream, soft_wrap=False)
    if not console.is_terminal:
        stream.write(page.strip() + "\n")
        return 0
    from rich.markdown import Markdown

    console.print(Markdown(page))
    return 0


def print_rule_table(fmt: str = "table", stream=None) -> int:
    """List every rule (code, name, severity, default on/off, fix: safe
    with ``--fix``, unsafe with ``--unsafe-fixes``, none); returns 0."""
    stream = stream or sys.stdout
    records = [rule_record(rule) for rule in all_rules()]
    if fmt == "json":
        json.dump(records, stream, indent=2)
        stream.write("\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(show_edge=False, header_style="bold")
    for column in ("Code", "Name", "Severity", "Default", "Fix"):
        table.add_column(column)
    for record in records:
        table.add_row(
            record["code"],
            record["name"],
            record["severity"],
            "on" if record["default_enabled"] else "off",
            record["fix_applicability"] or "none",
        )
    console = Console(file=stream)
    if not console.is_terminal:
        console.width = 200  # piped output: never truncate a name
    console.print(table)
    return 0
