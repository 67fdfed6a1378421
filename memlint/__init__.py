"""memlint: catch GPU-memory problems in deep-learning training code.

The linter (``memlint check``) never imports torch; the estimator
(``memlint estimate``) and validator (``memlint validate``) import it lazily.
``memlint.Workload`` is resolved lazily so that ``import memlint`` stays cheap.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "Workload"]


def __getattr__(name):
    if name == "Workload":
        from memlint.estimate.workload import Workload

        return Workload
    raise AttributeError(f"module 'memlint' has no attribute {name!r}")
