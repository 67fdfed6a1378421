"""The memlint estimator: predict the CUDA memory of one training step without a GPU.

Importing this package does not import torch; the submodules that need torch
(``api``, ``tracer``, ``step``) import it themselves.  See docs/estimator.md.
"""
