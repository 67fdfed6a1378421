"""A `.memlint_cache/` committed to the repository can neither hide nor invent
findings (item 8 of issue 18): entries are signed with the user's own key."""

from __future__ import annotations

import json
from pathlib import Path

from memlint.config import Config
from memlint.lint import cache

from .conftest import run_cli

CLEAN = "import torch\nstate = torch.load('ckpt.pt', map_location='cpu')\n"


def _entries(root: Path) -> list[Path]:
    return sorted((root / ".memlint_cache").glob(f"{cache.FORMAT_VERSION}/*/*.json"))


def _key_of(user_cache: Path) -> bytes:
    return (user_cache / "memlint" / "cache-key").read_bytes()


def _findings(completed) -> list[dict]:
    return json.loads(completed.stdout)["diagnostics"]


def test_entries_signed_by_another_key_are_ignored(tree, tmp_path):
    root = tree({})
    attacker = {"XDG_CACHE_HOME": str(tmp_path / "attacker")}
    assert _findings(run_cli("--format", "json", ".", cwd=root, env=attacker))  # fills the cache
    store = cache.Store(root / ".memlint_cache", cache.settings_fingerprint(Config()), _key_of(tmp_path / "attacker"))
    for entry in _entries(root):
        store.save_payload(entry.stem, {"parsed": True, "diagnostics": []})  # "nothing to see here"
    assert _findings(run_cli("--format", "json", ".", cwd=root, env=attacker)) == []  # the forgery works for its key
    victim = run_cli("--format", "json", ".", cwd=root, env={"XDG_CACHE_HOME": str(tmp_path / "victim")})
    assert [(d["path"], d["code"]) for d in _findings(victim)] == [("./buggy.py", "MEM303")]


def test_an_entry_renamed_to_another_files_key_is_ignored(tree, tmp_path):
    root = tree({"clean.py": CLEAN})
    user = {"XDG_CACHE_HOME": str(tmp_path / "user")}
    first = run_cli("--format", "json", ".", cwd=root, env=user)
    entries = _entries(root)
    assert len(entries) == 2 and _findings(first)
    payloads = {entry: json.loads(entry.read_bytes().partition(b"\n")[2]) for entry in entries}
    clean_entry = next(entry for entry, payload in payloads.items() if not payload["diagnostics"])
    for entry in entries:
        entry.write_bytes(clean_entry.read_bytes())  # every entry now says "no findings", validly signed
    again = run_cli("--format", "json", ".", cwd=root, env=user)
    assert [(d["path"], d["code"]) for d in _findings(again)] == [("./buggy.py", "MEM303")]


def test_a_forged_finding_is_not_invented(tree, tmp_path):
    root = tree({"clean.py": CLEAN})
    (root / "buggy.py").unlink()
    run_cli("--format", "json", ".", cwd=root, env={"XDG_CACHE_HOME": str(tmp_path / "a")})
    [entry] = _entries(root)
    forged = {"parsed": True, "diagnostics": [["MEM303", "load-without-map-location", "warning", "forged", 2, 9, 2,
                                                 19, None]]}
    entry.write_bytes(b"0" * 64 + b"\n" + json.dumps(forged).encode())
    victim = run_cli("--format", "json", ".", cwd=root, env={"XDG_CACHE_HOME": str(tmp_path / "b")})
    assert _findings(victim) == []


def test_planted_links_in_the_cache_are_not_followed(tree, tmp_path):
    root = tree({})
    user = {"XDG_CACHE_HOME": str(tmp_path / "user")}
    expected = _findings(run_cli("--format", "json", ".", cwd=root, env=user))
    for entry in _entries(root):
        entry.unlink()
        entry.symlink_to("/dev/zero")  # read whole, it would never end
    assert _findings(run_cli("--format", "json", ".", cwd=root, env=user, timeout=30)) == expected
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / ".memlint_cache").rename(tmp_path / "old-cache")
    (root / ".memlint_cache").symlink_to(elsewhere, target_is_directory=True)
    assert _findings(run_cli("--format", "json", ".", cwd=root, env=user)) == expected
    assert list(elsewhere.iterdir()) == []  # nothing written through the link
