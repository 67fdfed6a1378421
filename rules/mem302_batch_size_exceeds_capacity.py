"""MEM302 batch-size-exceeds-capacity."""

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule

# The examples carry an estimate comment block naming a tiny model (an MLP
# fixture, ~0.4 GiB with Adam at batch 32) and an explicit ``capacity=`` so
# that they are decidable anywhere; they run through the full `memlint check`
# path (tests/integrate/test_integrate.py::test_needs_estimate_rule_examples), not the lint-only example harness.
_HEADER = ("# memlint: estimate target=fixtures/models/mlp.py:build capacity={capacity} reserve=0%"
           " advise=false\n"
           "import torch\nfrom torch.utils.data import DataLoader\n")


class BatchSizeExceedsCapacity(Rule):
    """## What it does
    Reports the batch size of a training script (a literal in
    `DataLoader(batch_size=...)`, a module constant, an `argparse` default or
    a config-class default) when the memory estimator says that one training
    step at that batch size does not fit the configured target GPU. The
    message gives the estimated device memory against the capacity (GiB) and
    the largest batch size that fits. The estimate imports and runs the
    script's model factory, so it runs only when the command line asks for
    it (`memlint --estimate train.py`, in its own child process with time
    and memory limits, see docs/security.md); a plain `memlint check` notes
    that an estimate is configured and reports no MEM302.

    ## Why is this bad?
    The script will fail with `CUDA out of memory` on its first step (or, with
    a fragmented cache, after some steps), after the job has waited in the
    queue and loaded its data. The estimator traces the same step -- forward,
    loss, backward, optimizer step, with the script's optimizer, autocast
    dtype, checkpointing and gradient accumulation -- on the meta device, so
    the answer comes before any GPU hour is spent.

    ## Example
    ```python
    # memlint: estimate target=models.py:build_llama gpu=A100-40GB
    loader = DataLoader(dataset, batch_size=64)
    ```

    ## Use instead
    ```python
    # memlint: estimate target=models.py:build_llama gpu=A100-40GB
    loader = DataLoader(dataset, batch_size=16)  # or a remedy from the advisor
    ```

    ## Options
    The estimate configuration: `[tool.memlint.estimate]` in pyproject.toml
    or a `# memlint: estimate key=value ...` comment block in the script
    (`target`, `input`, `gpu`, `capacity`, `reserve`, `optimizer`,
    `precision`, ... -- see docs/configuration.md, "Estimate configuration").
    Without one, the rule is silent (`--verbose` says so on stderr) and
    linting never imports torch.

    ## Known problems
    The batch size must be visible statically in the same file; values read
    from environment variables, other modules or the command line at run
    time are not followed (give `batch-size=` in the configuration instead).
    The verdict is as accurate as the estimator (docs/estimator.md); models
    built from data at run time need a factory that builds the same model.

    ## References
    - [CUDA memory management](https://pytorch.org/docs/stable/notes/cuda.html#memory-management)
    - [Understanding CUDA memory usage](https://pytorch.org/docs/stable/torch_cuda_memory.html)
    """

    CODE = "MEM302"
    NAME = "batch-size-exceeds-capacity"
    MESSAGE = "the batch size does not fit the target GPU according to the memory estimate"
    SEVERITY = Severity.ERROR
    TRIGGERS = ("memlint: estimate",)  # nothing to do at lint time: parse no extra files
    #: The verdict needs the estimator: the hooks do nothing, memlint.integrate
    #: reports MEM302 after the estimate; the examples run through `memlint check`.
    NEEDS_ESTIMATE = True
    VALID = (
        _HEADER.format(capacity="2GiB") + "loader = DataLoader(range(10), batch_size=32)\n",
        _HEADER.format(capacity="2GiB") + "BATCH_SIZE = 64\nloader = DataLoader(range(10), batch_size=BATCH_SIZE)\n",
        # near miss: too small a GPU, but no estimate is configured -> silent
        "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(range(10), batch_size=100000)\n",
        _HEADER.format(capacity="1GiB") + "import argparse\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--batch-size', type=int, default=16)\n",
    )
    INVALID = (
        _HEADER.format(capacity="600MiB") + "loader = DataLoader(range(10), batch_size=60000)  # expect: MEM302\n",
        _HEADER.format(capacity="600MiB") + "BATCH_SIZE = 60000  # expect: MEM302\n"
        "loader = DataLoader(range(10), batch_size=BATCH_SIZE)\n",
        _HEADER.format(capacity="600MiB") + "import argparse\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--batch-size', type=int, default=60000)  # expect: MEM302\n",
    )
