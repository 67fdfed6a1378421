"""memlint.report.text: what the reports do to untrusted text (issue 18, item 5)."""

from __future__ import annotations

import os

import pytest

from memlint.report.text import printable, valid_document, valid_unicode


@pytest.mark.parametrize(("raw", "shown"), [
    ("train.py", "train.py"),
    ("with space and ünïcode.py", "with space and ünïcode.py"),
    ("a\nb", "a\\nb"),
    ("a\r\tb", "a\\r\\tb"),
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("bell\x07 del\x7f c1\x9b", "bell\\x07 del\\x7f c1\\x9b"),
    ("rtl\u202eoverride", "rtl\\u202eoverride"),
    ("line\u2028sep", "line\\u2028sep"),
    (os.fsdecode(b"bad\xff\xfe.py"), "bad\\xff\\xfe.py"),
])
def test_printable(raw, shown):
    assert printable(raw) == shown
    assert printable(shown) == shown  # escapes are printable themselves


def test_valid_unicode_only_touches_surrogates():
    name = os.fsdecode(b"bad\xff.py")
    assert valid_unicode(name) == "bad\\xff.py"
    assert valid_unicode("esc\x1b ok") == "esc\x1b ok"  # JSON escapes that itself
    document = valid_document({"path": name, "list": [name, 3, None], name: True})
    assert document == {"path": "bad\\xff.py", "list": ["bad\\xff.py", 3, None], "bad\\xff.py": True}
