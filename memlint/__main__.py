"""``python -m memlint`` runs the same CLI as the ``memlint`` console script.

``-m`` puts the working directory first on ``sys.path``; it is dropped
before anything else is imported, so that a linted tree's ``rich.py`` or
``tomllib.py`` is never imported in place of the real module.
"""

import os
import sys

if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == os.getcwd():
    del sys.path[0]

from memlint.cli import main  # noqa: E402 - after the path fix above

sys.exit(main())
