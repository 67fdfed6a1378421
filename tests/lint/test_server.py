"""``memlint server``: spawned, spoken to in JSON-RPC over stdio (LSP), with a time bound.

initialize -> didOpen (a Python file, a notebook document) -> publishDiagnostics
-> codeAction -> didChange -> hover -> shutdown/exit.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("pygls")

#: Seconds any one answer may take (the server lints in milliseconds).
TIMEOUT = 30

LEAK = ("import torch\nimport torch.nn as nn\nmodel = nn.Linear(4, 1).cuda()\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\ntotal = 0\nfor i in range(1000):\n"
        "    loss = model(torch.randn(2, 4).cuda()).mean()\n    loss.backward()\n    opt.step()\n"
        "    opt.zero_grad()\n    total += loss\n")


class Client:
    """A minimal LSP client: Content-Length framed JSON-RPC on the server's pipes."""

    def __init__(self, cwd: Path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen([sys.executable, "-m", "memlint", "server"], cwd=cwd, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.messages: queue.Queue = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            headers = {}
            while True:
                line = stream.readline()
                if not line:
                    return
                line = line.decode("ascii").strip()
                if not line:
                    break
                key, _, value = line.partition(":")
                headers[key.lower()] = value.strip()
            body = stream.read(int(headers["content-length"]))
            self.messages.put(json.loads(body))

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        answer = self.wait(lambda m: m.get("id") == self.next_id and "method" not in m)
        assert "error" not in answer, answer
        return answer["result"]

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def wait(self, matches, timeout: float = TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no matching message from the server in time")
            try:
                message = self.messages.get(timeout=left)
            except queue.Empty:
                continue
            if matches(message):
                return message

    def diagnostics_for(self, uri: str) -> list[dict]:
        message = self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                            and m["params"]["uri"] == uri)
        return message["params"]["diagnostics"]

    def close(self) -> int:
        try:
            self.request("shutdown", None)
            self.notify("exit", None)
            return self.process.wait(timeout=TIMEOUT)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def client(tmp_path):
    started = Client(tmp_path)
    result = started.request("initialize", {"processId": os.getpid(), "rootUri": tmp_path.as_uri(),
                                            "capabilities": {"notebookDocument": {"synchronization": {}}}})
    started.capabilities = result["capabilities"]
    started.notify("initialized", {})
    yield started
    if started.process.poll() is None:
        started.process.kill()
        started.process.wait()


def test_python_file_diagnostics_code_actions_and_exit(client, tmp_path):
    assert client.capabilities["codeActionProvider"]
    assert client.capabilities["notebookDocumentSync"]["notebookSelector"]
    uri = (tmp_path / "train.py").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                            "text": LEAK}})
    diagnostics = client.diagnostics_for(uri)
    mem101 = next(d for d in diagnostics if d["code"] == "MEM101")
    assert mem101["range"]["start"] == {"line": 10, "character": 4}
    assert mem101["severity"] == 1 and mem101["source"] == "memlint"
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": mem101["range"], "context": {"diagnostics": [mem101]}})
    fix = next(a for a in actions if "MEM101" in a["title"])
    assert fix["kind"] == "quickfix" and fix["isPreferred"] is True
    edit = fix["edit"]["changes"][uri][0]
    assert edit["newText"].endswith(".detach()") or ".detach()" in edit["newText"]
    fix_all = next(a for a in actions if a["kind"] == "source.fixAll.memlint")
    whole = fix_all["edit"]["changes"][uri][0]
    assert whole["range"]["start"] == {"line": 0, "character": 0}
    assert "total += loss.detach()" in whole["newText"] and whole["newText"].count("\n") == LEAK.count("\n")
    hover = client.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": mem101["range"]["start"]})
    assert "MEM101" in hover["contents"]["value"]
    # an edit that removes the leak clears the diagnostic
    fixed = LEAK.replace("total += loss", "total += loss.item()")
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": fixed}]})
    assert not [d for d in client.diagnostics_for(uri) if d["code"] == "MEM101"]
    assert client.close() == 0


def test_notebook_document_cells_get_their_diagnostics(client, tmp_path):
    notebook_uri = (tmp_path / "nb.ipynb").as_uri()
    cells = [("markdown", "# Train"), ("code", "%matplotlib inline\n" + LEAK.split("total = 0\n")[0]),
             ("code", "total = 0\n" + LEAK.split("total = 0\n")[1]), ("code", "loss")]
    cell_uris = [f"vscode-notebook-cell:{tmp_path}/nb.ipynb#cell{i}" for i in range(len(cells))]
    client.notify("notebookDocument/didOpen", {
        "notebookDocument": {"uri": notebook_uri, "notebookType": "jupyter-notebook", "version": 1,
                             "cells": [{"kind": 2 if kind == "code" else 1, "document": cell_uris[i]}
                                       for i, (kind, _) in enumerate(cells)]},
        "cellTextDocuments": [{"uri": cell_uris[i], "languageId": "python" if kind == "code" else "markdown",
                               "version": 1, "text": text} for i, (kind, text) in enumerate(cells)],
    })
    published = {}
    while len(published) < 3:
        message = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics")
        published[message["params"]["uri"]] = message["params"]["diagnostics"]
    assert set(published) == set(cell_uris[1:])
    mem101 = next(d for d in published[cell_uris[2]] if d["code"] == "MEM101")
    assert mem101["range"]["start"]["line"] == 6  # line 7 of the cell, 0-based
    assert [d["code"] for d in published[cell_uris[3]]] == ["MEM113"]
    assert not [d for d in published[cell_uris[1]] if d["code"] == "MEM001"]  # the magic is masked
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": cell_uris[3]}, "range": published[cell_uris[3]][0]["range"],
        "context": {"diagnostics": published[cell_uris[3]]}})
    assert actions and actions[0]["kind"] == "quickfix.unsafe" and "(unsafe)" in actions[0]["title"]
    assert actions[0]["edit"]["changes"][cell_uris[3]][0]["newText"] == ";"
    # an edit of one cell re-lints the notebook: the fixed accumulation is gone
    old = cells[2][1]
    line = old.splitlines().index("    total += loss")
    client.notify("notebookDocument/didChange", {
        "notebookDocument": {"uri": notebook_uri, "version": 2},
        "change": {"cells": {"textContent": [{
            "document": {"uri": cell_uris[2], "version": 2},
            "changes": [{"range": {"start": {"line": line, "character": 17}, "end": {"line": line, "character": 17}},
                         "text": ".item()"}]}]}}})
    after = client.diagnostics_for(cell_uris[2])
    assert not [d for d in after if d["code"] == "MEM101"]
    assert client.close() == 0


def test_server_without_pygls_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "pygls.py"
    blocker.write_text("raise ImportError('no pygls here')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "memlint", "server"], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "memlint: error: `memlint server` needs pygls: pip install 'memlint[lsp]'"


def test_notebook_opened_as_json_text_places_findings_on_its_lines(client, tmp_path):
    repo = Path(__file__).resolve().parents[2]
    text = (repo / "fixtures" / "notebooks" / "train_leak.ipynb").read_text(encoding="utf-8")
    uri = (tmp_path / "train_leak.ipynb").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "json", "version": 1,
                                                            "text": text}})
    diagnostics = client.diagnostics_for(uri)
    lines = text.splitlines()
    mem404 = next(d for d in diagnostics if d["code"] == "MEM404")
    assert mem404["message"].startswith("cell 12:2:1: ")
    assert "torch.cuda.empty_cache()" in lines[mem404["range"]["start"]["line"]]
    assert client.close() == 0
