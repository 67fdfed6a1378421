"""The validator: run a workload's training step on a real device and compare with the estimate.

* :mod:`memlint.validate.runner` -- builds the workload with real tensors and runs the
  same step structure the estimator traces (memlint/estimate/step.py);
* :mod:`memlint.validate.cpu` -- CPU ground truth from the PyTorch profiler's memory events;
* :mod:`memlint.validate.cuda` -- CUDA measurement (allocator statistics and NVML);
* :mod:`memlint.validate.record` -- the JSON record (``--record``) and its schema;
* :mod:`memlint.validate.campaign` -- the GPU validation campaign;
* :mod:`memlint.validate.accuracy` -- accuracy bounds and the docs/accuracy.md tables.

Nothing here imports torch at module level.
"""
