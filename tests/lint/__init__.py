"""Linter tests (a package so that module names do not clash with tests/estimate)."""
