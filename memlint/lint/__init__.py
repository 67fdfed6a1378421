"""The linter: one CPython ``ast`` parse per file, every enabled rule in one visit."""
