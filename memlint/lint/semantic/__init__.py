"""The semantic model of a file: one analysis of what every value is,
shared by every rule (see :mod:`memlint.lint.semantic.model`)."""
