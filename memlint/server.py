"""``memlint server``: a Language Server (LSP, over stdio) built on pygls.

What it serves:

- **diagnostics** (``textDocument/publishDiagnostics``) for Python files
  on open, change and save, and for Jupyter notebooks through LSP notebook
  document sync (``notebookDocument/didOpen|didChange|didSave``): the whole
  notebook is linted as one module, as ``memlint check`` lints it, and each
  code cell gets its own diagnostics, published to the cell's document.
  A ``.ipynb`` file that a client opens as a plain (JSON) text document is
  linted too; its diagnostics are placed on the JSON line that holds the
  reported line of the cell's ``source`` and name the cell in the message.
- **code actions** (``textDocument/codeAction``) from the rules' fixes:
  a safe fix is a ``quickfix`` (preferred); an unsafe one is offered as
  ``quickfix.unsafe`` with "(unsafe)" in its title, so an editor never
  applies it on its own.
  For a Python file, ``source.fixAll.memlint`` applies every safe fix
  (in rounds, as ``memlint --fix`` does) as one edit of the document.
- **hover**: the rule's summary and documentation link on a reported span.

Settings come from the nearest ``pyproject.toml`` ``[tool.memlint]`` of each
file, as on the command line (``select``/``ignore``/``per-file-ignores``);
a bad configuration is shown once as an error message and that file gets
no diagnostics. Nothing of the edited code is imported or run.

Columns: memlint counts Unicode code points; LSP positions count UTF-16
code units unless the client and pygls agree on another position encoding
(``utf-8``, ``utf-32``): the server converts with each line's text.

This module imports pygls; the lint path never imports it (pygls is the
optional ``lsp`` extra: ``pip install 'memlint[lsp]'``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from memlint import __version__
from memlint.lint.diagnostic import Applicability, Diagnostic, Severity
from memlint.lint.notebook import is_notebook_path

SOURCE = "memlint"
UNSAFE_QUICKFIX = "quickfix.unsafe"
FIX_ALL = "source.fixAll.memlint"

_SEVERITIES = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}

logger = logging.getLogger(__name__)


@dataclass
class Published:
    """What was last published for one document: memlint's findings (in the
    document's own coordinates) with the LSP diagnostics made of them."""

    pairs: list[tuple[Diagnostic, types.Diagnostic]] = field(default_factory=list)
    #: the document's lines (for UTF-16 columns in code actions)
    lines: list[str] = field(default_factory=list)


class MemlintServer(LanguageServer):
    """The memlint language server: pygls' server plus the last findings per document."""

    def __init__(self) -> None:
        super().__init__(
            "memlint", __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                notebook_selector=[types.NotebookDocumentFilterWithCells(
                    notebook="jupyter-notebook", cells=[types.NotebookCellLanguage(language="python")])],
                save=True,
            ),
        )
        self.published: dict[str, Published] = {}
        self._config_errors: set[str] = set()

    # -- linting ---------------------------------------------------------------------
    def options_for(self, path: str):
        """The :class:`~memlint.lint.engine.LintOptions` of ``path`` from its
        configuration, or None after showing a configuration error once."""
        from memlint.check import selection
        from memlint.config import load_config
        from memlint.errors import UsageError
        from memlint.lint.runner import options_for

        try:
            config = load_config(None, Path(path).absolute())
            if config.is_excluded(path):
                return None
            enabled = selection(_NO_OPTIONS, config)
            return options_for(path, enabled, config)
        except UsageError as exc:
            message = f"memlint: {exc}"
            if message not in self._config_errors:
                self._config_errors.add(message)
                self.window_show_message(types.ShowMessageParams(types.MessageType.Error, message))
            return None

    def lint_text_document(self, uri: str) -> None:
        """Lint a Python file (or a notebook opened as JSON text) and publish its diagnostics."""
        from memlint.lint.engine import lint_source

        if self.workspace.get_notebook_document(cell_uri=uri) is not None:
            return  # a notebook cell: the notebook is linted as a whole
        document = self.workspace.get_text_document(uri)
        path = uri_to_path(uri)
        options = self.options_for(path)
        if options is None:
            self.publish(uri, [], [])
            return
        result = lint_source(path, document.source.encode("utf-8", errors="surrogatepass"), options)
        lines = document.source.splitlines()
        if result.error:
            self.publish(uri, [], lines, extra=[_file_problem(result.error)])
            return
        if is_notebook_path(path):
            self.publish_json_notebook(uri, document.source, result.diagnostics)
            return
        self.publish(uri, result.diagnostics, lines)

    def lint_notebook_document(self, notebook_uri: str) -> None:
        """Lint a synced notebook as one module; publish each code cell's diagnostics."""
        from memlint.lint.engine import lint_notebook
        from memlint.lint.notebook import notebook_from_cell_sources

        notebook = self.workspace.get_notebook_document(notebook_uri=notebook_uri)
        if notebook is None:
            return
        path = uri_to_path(notebook_uri)
        cells = []
        for cell in notebook.cells:
            text = self.workspace.get_text_document(cell.document).source
            cells.append(("code" if cell.kind == types.NotebookCellKind.Code else "markdown", text))
        options = self.options_for(path)
        found = [] if options is None else lint_notebook(notebook_from_cell_sources(path, cells), options).diagnostics
        for number, cell in enumerate(notebook.cells, start=1):
            if cell.kind != types.NotebookCellKind.Code:
                continue
            lines = self.workspace.get_text_document(cell.document).source.splitlines()
            self.publish(cell.document, [d for d in found if d.cell == number], lines)

    def publish(self, uri: str, diagnostics: list[Diagnostic], lines: list[str],
                extra: list[types.Diagnostic] | None = None) -> None:
        """Publish ``diagnostics`` (positions in ``lines``) for ``uri`` and remember them."""
        pairs = [(d, to_lsp(d, lines)) for d in diagnostics]
        self.published[uri] = Published(pairs, lines)
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=[lsp for _, lsp in pairs] + (extra or [])))

    def publish_json_notebook(self, uri: str, text: str, diagnostics: list[Diagnostic]) -> None:
        """A notebook opened as JSON text: each finding on the JSON line of its cell line."""
        from memlint.lint.notebook import source_line_numbers

        try:
            where = source_line_numbers(text)
        except ValueError:
            where = {}
        lines = text.splitlines()
        out = []
        for d in diagnostics:
            json_line = where.get((d.cell, d.line), 0)
            width = len(lines[json_line]) if json_line < len(lines) else 0
            out.append(types.Diagnostic(
                range=types.Range(types.Position(json_line, 0), types.Position(json_line, width)),
                message=f"cell {d.cell}:{d.line}:{d.col}: {d.message}", severity=_SEVERITIES[d.severity],
                code=d.code, source=SOURCE, code_description=_code_description(d.code)))
        self.published[uri] = Published([], lines)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=out))

    # -- code actions and hover ----------------------------------------------------------
    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        """Quick fixes for the findings that touch the requested range."""
        published = self.published.get(params.text_document.uri)
        if published is None:
            return []
        wanted = params.range
        actions = []
        touched = [(finding, lsp) for finding, lsp in published.pairs
                   if finding.fix is not None and _overlaps(lsp.range, wanted)]
        for finding, lsp in self._resolved(params.text_document.uri, touched):
            if finding.fix is None:
                continue
            safe = finding.fix.applicability is Applicability.SAFE
            edits = [types.TextEdit(range=_range(e.start_line, e.start_col, e.end_line, e.end_col, published.lines),
                                    new_text=e.content) for e in finding.fix.edits]
            title = f"{finding.fix.title} ({finding.code})" + ("" if safe else " (unsafe)")
            actions.append(types.CodeAction(
                title=title, kind=types.CodeActionKind.QuickFix if safe else UNSAFE_QUICKFIX,
                diagnostics=[lsp], is_preferred=safe,
                edit=types.WorkspaceEdit(changes={params.text_document.uri: edits})))
        fix_all = self.fix_all_action(params.text_document.uri, published)
        if fix_all is not None:
            actions.append(fix_all)
        return actions

    def _resolved(self, uri: str, pairs: list) -> list:
        """``pairs`` (finding, LSP diagnostic) with each finding's fix turned
        into edits by the libcst fix engine on the document's text (loaded
        only for a code action; a fix it cannot apply is not offered)."""
        if all(finding.fix.resolved for finding, _ in pairs):
            return pairs
        from memlint.fix import resolve

        text = self.workspace.get_text_document(uri).source
        findings = resolve(text, [finding for finding, _ in pairs])
        return [(finding, lsp) for finding, (_, lsp) in zip(findings, pairs)]

    def fix_all_action(self, uri: str, published: Published) -> types.CodeAction | None:
        """Every safe fix of a Python file, as one whole-document edit (None
        for a notebook cell, or when there is nothing safe to fix)."""
        if self.workspace.get_notebook_document(cell_uri=uri) is not None or is_notebook_path(uri_to_path(uri)):
            return None
        findings = [finding for finding, _ in published.pairs]
        if not any(f.fix is not None and f.fix.applicability is Applicability.SAFE for f in findings):
            return None
        from memlint.lint.fixes import fix_text

        path = uri_to_path(uri)
        options = self.options_for(path)
        if options is None:
            return None
        text = self.workspace.get_text_document(uri).source
        outcome = fix_text(path, text, options, False, findings)
        if not outcome.changed:
            return None
        lines = text.splitlines()
        end = types.Position(line=len(lines), character=0)
        whole = types.Range(start=types.Position(line=0, character=0), end=end)
        return types.CodeAction(title=f"memlint: fix all safely fixable problems ({outcome.fixed_count})",
                                kind=FIX_ALL, edit=types.WorkspaceEdit(changes={uri: [
                                    types.TextEdit(range=whole, new_text=outcome.fixed)]}))

    def hover(self, params: types.HoverParams) -> types.Hover | None:
        """The reported rule's summary and page link at the hovered position."""
        published = self.published.get(params.text_document.uri)
        if published is None:
            return None
        position = params.position
        for finding, lsp in published.pairs:
            if _contains(lsp.range, position):
                from memlint.docs_gen import summary
                from memlint.lint.registry import rules_by_code
                from memlint.report.rule_docs import rule_url

                rule = rules_by_code().get(finding.code)
                text = f"**{finding.code}** `{finding.name}`: {finding.message}"
                if rule is not None:
                    text += f"\n\n{summary(rule)}\n\n[{finding.code} documentation]({rule_url(finding.code)})"
                return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text),
                                   range=lsp.range)
        return None


class _NoOptions:
    """The command-line options a server run has: none (configuration only)."""

    select = None
    extend_select = None
    ignore = None


_NO_OPTIONS = _NoOptions()


def uri_to_path(uri: str) -> str:
    """The file system path of a ``file:`` URI (other schemes: the URI's path)."""
    parsed = urlparse(uri)
    path = unquote(parsed.path)
    if os.name == "nt" and path.startswith("/") and len(path) > 2 and path[2] == ":":
        path = path[1:]
    return path


#: The position encoding the session uses (set at initialize; LSP's default).
_ENCODING = {"name": "utf-16"}


def _units(line: str, col: int) -> int:
    """Code-point column ``col`` (0-based) of ``line`` in the session's position encoding."""
    prefix = line[:col]
    if prefix.isascii() or _ENCODING["name"] == "utf-32":
        return col
    if _ENCODING["name"] == "utf-8":
        return len(prefix.encode("utf-8", errors="surrogatepass"))
    return len(prefix.encode("utf-16-le", errors="surrogatepass")) // 2


def _position(line: int, col: int, lines: list[str]) -> types.Position:
    """LSP position of memlint's 1-based (line, col)."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return types.Position(line=max(0, line - 1), character=_units(text, max(0, col - 1)))


def _range(line: int, col: int, end_line: int, end_col: int, lines: list[str]) -> types.Range:
    return types.Range(start=_position(line, col, lines), end=_position(end_line, end_col, lines))


def _code_description(code: str) -> types.CodeDescription:
    from memlint.report.rule_docs import rule_url

    return types.CodeDescription(href=rule_url(code))


def to_lsp(diagnostic: Diagnostic, lines: list[str]) -> types.Diagnostic:
    """The LSP diagnostic of one finding (positions converted to the client's units)."""
    return types.Diagnostic(
        range=_range(diagnostic.line, diagnostic.col, diagnostic.end_line, diagnostic.end_col, lines),
        message=diagnostic.message,
        severity=_SEVERITIES[diagnostic.severity],
        code=diagnostic.code,
        code_description=_code_description(diagnostic.code),
        source=SOURCE,
        data={"fixable": diagnostic.fix is not None},
    )


def _file_problem(message: str) -> types.Diagnostic:
    return types.Diagnostic(range=types.Range(types.Position(0, 0), types.Position(0, 0)), message=message,
                            severity=types.DiagnosticSeverity.Error, source=SOURCE)


def _before(a: types.Position, b: types.Position) -> bool:
    return (a.line, a.character) < (b.line, b.character)


def _overlaps(found: types.Range, wanted: types.Range) -> bool:
    """The ranges share a position (an empty requested range at the cursor counts)."""
    return not _before(found.end, wanted.start) and not _before(wanted.end, found.start)


def _contains(found: types.Range, position: types.Position) -> bool:
    return not _before(position, found.start) and not _before(found.end, position)


def build_server() -> MemlintServer:
    """A :class:`MemlintServer` with its LSP features registered."""
    server = MemlintServer()

    @server.feature(types.INITIALIZED)
    def initialized(ls: MemlintServer, params: types.InitializedParams) -> None:
        encoding = getattr(ls.server_capabilities, "position_encoding", None)
        _ENCODING["name"] = str(getattr(encoding, "value", encoding) or "utf-16")

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: MemlintServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.lint_text_document(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: MemlintServer, params: types.DidChangeTextDocumentParams) -> None:
        notebook = ls.workspace.get_notebook_document(cell_uri=params.text_document.uri)
        if notebook is not None:
            ls.lint_notebook_document(notebook.uri)
        else:
            ls.lint_text_document(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: MemlintServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.lint_text_document(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: MemlintServer, params: types.DidCloseTextDocumentParams) -> None:
        if ls.published.pop(params.text_document.uri, None) is not None:
            ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri,
                                                                                diagnostics=[]))

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_open(ls: MemlintServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.lint_notebook_document(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_change(ls: MemlintServer, params: types.DidChangeNotebookDocumentParams) -> None:
        ls.lint_notebook_document(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_save(ls: MemlintServer, params: types.DidSaveNotebookDocumentParams) -> None:
        ls.lint_notebook_document(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_close(ls: MemlintServer, params: types.DidCloseNotebookDocumentParams) -> None:
        for cell in params.cell_text_documents:
            ls.published.pop(cell.uri, None)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, UNSAFE_QUICKFIX, FIX_ALL]))
    def code_action(ls: MemlintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return ls.code_actions(params)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: MemlintServer, params: types.HoverParams) -> types.Hover | None:
        return ls.hover(params)

    return server


def main() -> int:
    """Serve LSP over stdin/stdout until the client says ``exit``; returns 0."""
    build_server().start_io()
    return 0
