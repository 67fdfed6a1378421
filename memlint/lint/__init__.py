"""The linter: one libcst parse per file, every enabled rule in one visit."""
