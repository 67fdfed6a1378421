"""memlint's lint rules, one module per rule (installed as ``memlint.rules``).

See ../shared/RULES.md for the catalog and docs/rules/ for each rule's page.
"""
