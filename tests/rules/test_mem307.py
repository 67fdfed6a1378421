"""MEM307 unbounded-cache-on-method: decorator spellings and the exemptions of RULES.md."""

from rule_helpers import lines


def test_keyword_and_positional_none():
    assert lines("MEM307", """
        import functools as ft
        class A:
            @ft.lru_cache(maxsize=None, typed=True)
            def f(self, x):
                return x
            @ft.lru_cache(None)
            def g(self, x):
                return x
    """) == [4, 7]


def test_variable_maxsize_is_not_known():
    assert lines("MEM307", """
        import functools
        SIZE = None
        class A:
            @functools.lru_cache(maxsize=SIZE)
            def f(self, x):
                return x
    """) == []


def test_enum_through_an_in_file_base():
    assert lines("MEM307", """
        import enum
        from functools import cache
        class Base(enum.IntFlag):
            pass
        class Mode(Base):
            A = 1
            @cache
            def label(self):
                return str(self)
    """) == []


def test_lookalike_cache_decorator():
    assert lines("MEM307", """
        from mylib import cache
        class A:
            @cache
            def f(self, x):
                return x
    """) == []


def test_dataset_message_names_getitem():
    from memlint.lint.engine import LintOptions, lint_source
    source = (
        "from functools import cache\nfrom torch.utils.data import Dataset\n"
        "class D(Dataset):\n    @cache\n    def __getitem__(self, i):\n        return i\n"
    )
    found = lint_source("d.py", source.encode(), LintOptions(frozenset({"MEM307"}))).diagnostics
    assert [d.line for d in found] == [4] and "__getitem__" in found[0].message
