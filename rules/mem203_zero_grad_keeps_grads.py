"""MEM203 zero-grad-keeps-grads."""

import ast

from memlint.lint.diagnostic import Applicability, Fix, Severity
from memlint.lint.rule import Rule
from memlint.lint.syntax import is_constant
from memlint.rules._training import arguments_in_order, method_name


class ZeroGradKeepsGrads(Rule):
    """## What it does
    Reports `zero_grad(set_to_none=False)` (or `zero_grad(False)`) on an
    optimizer or a module.

    ## Why is this bad?
    `set_to_none=False` fills every `.grad` with zeros instead of freeing it,
    so one gradient tensor per parameter stays allocated between steps,
    including through the next forward pass, where the activation peak is.
    With the default (`set_to_none=True`, PyTorch >= 2.0) that memory is
    free until `.backward()` needs it, and the zero-fill kernels are saved.

    ## Example
    ```python
    optimizer.zero_grad(set_to_none=False)
    ```

    ## Use instead
    ```python
    optimizer.zero_grad()
    ```

    ## Fix safety
    The fix removes the argument (the default `set_to_none=True` applies).
    It is unsafe: the program can compute different results. Optimizers
    skip parameters whose `.grad` is None, where a zero gradient still
    moves them (weight decay, momentum), and code that adds into `p.grad`
    between `zero_grad` and `.backward()` (`p.grad += g`) fails on None.

    ## Known problems
    Code that reads or updates `p.grad` in place between `zero_grad` and
    `.backward()` (`p.grad.add_(...)`, custom gradient hooks) needs the
    zero tensors: the fix breaks it with an `AttributeError` on None. Such
    code should keep the argument and suppress the finding.

    ## References
    - [torch.optim.Optimizer.zero_grad](https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html)
    - [Performance tuning guide: use parameter.grad = None](https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html)
    """

    CODE = "MEM203"
    NAME = "zero-grad-keeps-grads"
    MESSAGE = "`zero_grad(set_to_none=False)` keeps a zero-filled gradient per parameter allocated between steps"
    SEVERITY = Severity.INFO
    FIX_TITLE = "Remove `set_to_none=False`"
    TRIGGERS = ("zero_grad",)
    NEEDS_NAMES = ("zero_grad",)
    FRAMEWORK = "torch"
    FIX_APPLICABILITY = Applicability.UNSAFE
    VALID = (
        "def step(opt):\n    opt.zero_grad()\n",
        "def step(opt):\n    opt.zero_grad(set_to_none=True)\n",
        "def step(model, flag):\n    model.zero_grad(set_to_none=flag)\n",
        "def zero_grad(set_to_none=False):\n    pass\n",
    )
    INVALID = (
        "def step(opt):\n    opt.zero_grad(set_to_none=False)  # expect: MEM203\n",
        "class T:\n    def step(self):\n        self.model.zero_grad(False)  # expect: MEM203\n",
        "def step(optimizers):\n    for o in optimizers:\n        o.zero_grad(set_to_none = False)  # expect: MEM203\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        if method_name(node) != "zero_grad":
            return
        for index, argument in enumerate(arguments_in_order(node)):
            name = argument.arg if isinstance(argument, ast.keyword) else None
            if name == "set_to_none" or (name is None and index == 0):
                if is_constant(argument.value if name else argument, False):
                    self.report(node, fix=self._without(node, index))
                return

    def _without(self, node: ast.Call, index: int) -> Fix:
        return self.fix(self.plan("remove_argument", node, index=index))
