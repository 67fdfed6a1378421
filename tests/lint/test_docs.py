"""Generated rule pages are current; the documented VS Code regex reads real
concise output; the configuration page covers every key."""

from __future__ import annotations

import json
import re

from memlint.docs_gen import expected_pages, index_page, rule_page, stale_pages
from memlint.lint.registry import all_rules

from .helpers import REPO, run_memlint

RULE_DOCS = REPO / "docs" / "rules"


def test_rule_pages_are_current():
    stale = stale_pages(RULE_DOCS)
    assert not stale, f"stale pages in docs/rules: {stale}; run `python -m memlint.docs_gen`"


def test_every_rule_has_a_page_with_its_docstring():
    pages = expected_pages()
    for rule in all_rules():
        page = pages[f"{rule.CODE}.md"]
        assert page.startswith(f"# {rule.CODE}: {rule.NAME}\n")
        assert rule.doc() in page
        assert f"[{rule.CODE}]({rule.CODE}.md)" in pages["index.md"]


def test_generator_check_mode(tmp_path):
    from memlint.docs_gen import generate, main

    assert main(["--check", "--out", str(tmp_path)]) == 1
    written = generate(tmp_path)
    assert {p.name for p in written} == set(expected_pages())
    assert main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "MEM303.md").write_text("edited by hand\n")
    assert stale_pages(tmp_path) == ["MEM303.md"]
    (tmp_path / "MEM999.md").write_text("a page for no rule\n")
    assert "MEM999.md" in stale_pages(tmp_path)
    assert not (generate(tmp_path) and (tmp_path / "MEM999.md").exists())


def test_index_lists_metadata():
    rules = all_rules()
    text = index_page(rules)
    for rule in rules:
        row = next(line for line in text.splitlines() if line.startswith(f"| [{rule.CODE}]"))
        assert f"`{rule.NAME}`" in row and f"| {rule.SEVERITY.value} |" in row
    assert "| Severity |" in rule_page(rules[0])


def _problem_matcher() -> dict:
    text = (REPO / "docs" / "integrations.md").read_text()
    block = re.search(r"```json\n(.*?)```", text, re.S).group(1)
    return json.loads(block)["tasks"][0]["problemMatcher"]


def test_vscode_problem_matcher_reads_concise_output(tmp_path):
    matcher = _problem_matcher()
    pattern = matcher["pattern"]
    regex = re.compile(pattern["regexp"])
    odd = tmp_path / "dir: with, odd chars"
    odd.mkdir()
    buggy = odd / "train.py"
    buggy.write_text("import torch; torch.cuda.init()\n\ndef f(p):\n    return torch.load(p)  # a: b: c\n")
    proc = run_memlint("check", "--format", "concise", str(buggy))
    lines = proc.stdout.splitlines()
    assert lines
    for line in lines:
        match = regex.match(line)
        assert match, line
        assert match.group(pattern["file"]) == str(buggy)
        assert (match.group(pattern["line"]), match.group(pattern["column"])) == ("4", "12")
        assert match.group(pattern["code"]) == "MEM303"
        assert match.group(pattern["message"]).startswith("`torch.load` without `map_location`")


def test_configuration_page_covers_every_key():
    from memlint.config import _KNOWN_KEYS, _LIST_KEYS

    text = (REPO / "docs" / "configuration.md").read_text()
    for key in set(_KNOWN_KEYS) | set(_LIST_KEYS):
        if key == "estimate":
            assert "[tool.memlint.estimate]" in text and "estimate configuration" in text.lower()
            continue
        assert f"## `{key}`" in text, key
        assert re.search(rf"^\"?{re.escape(key)}\"? = |^\[tool\.memlint\.{re.escape(key)}\]", text, re.M), f"no example for {key}"


def test_configuration_examples_are_valid_config(tmp_path):
    import tomllib

    from memlint.config import parse_table

    text = (REPO / "docs" / "configuration.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert len(blocks) >= 8
    for block in blocks:
        data = tomllib.loads(block)
        table = data.get("tool", {}).get("memlint", {})
        table.pop("estimate", None)
        parse_table(table, None)


def test_precommit_snippets_match_hook_file():
    import yaml

    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    text = (REPO / "docs" / "integrations.md").read_text()
    configs = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.startswith("repos:")]
    hooks = [h for config in configs for repo in config["repos"] for h in repo["hooks"]]
    assert len(hooks) == 2 and all(h["id"] == hook["id"] for h in hooks)
    local = next(h for h in hooks if "entry" in h)
    assert local["entry"] == hook["entry"] and local["types_or"] == hook["types_or"]
