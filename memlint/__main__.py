"""``python -m memlint`` runs the same CLI as the ``memlint`` console script."""

import sys

from memlint.cli import main

sys.exit(main())
