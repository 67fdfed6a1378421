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

    No fix is offered where the file updates a `.grad` in place
    (`p.grad += g`, `p.grad /= n`, `p.grad.add_(g)`, `p.grad.data.mul_(s)`),
    anywhere in the file (the update may be in another method of the
    class than the `zero_grad`), nor in a test function (a test may assert
    the argument itself, `mock.assert_called_with(set_to_none=False)`).

    ## Known problems
    Code that reads `p.grad` in other ways between `zero_grad` and
    `.backward()` (custom gradient hooks, `p.grad.sum()`) still gets the
    fix and may fail with an `AttributeError` on None.

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

    def _without(self, node: ast.Call, index: int) -> Fix | None:
        """The argument removed, unless the zero gradients are needed (see "Fix safety")."""
        semantic = self.ctx.semantic
        if self._updates_grad_in_place() or any(semantic.is_test_function(a) for a in semantic.ancestors(node)):
            return None
        return self.fix(self.plan("remove_argument", node, index=index))

    def _updates_grad_in_place(self) -> bool:
        """The file adds, scales or copies into a ``.grad`` in place, which fails on None."""
        found = self.__dict__.get("_grad_updated")
        if found is None:
            index = self.ctx.index
            found = self.__dict__["_grad_updated"] = any(
                _is_grad(update.target) for update in index.of_type(ast.AugAssign)) or any(
                _is_in_place_grad_call(call) for call in index.of_type(ast.Call))
        return found


def _is_grad(target: ast.expr) -> bool:
    """``x.grad`` or ``x.grad.data``, or an item of them (``p.grad[mask]``)."""
    while isinstance(target, ast.Subscript):
        target = target.value
    if isinstance(target, ast.Attribute) and target.attr == "data":
        target = target.value
    return isinstance(target, ast.Attribute) and target.attr == "grad"


def _is_in_place_grad_call(call: ast.Call) -> bool:
    """``x.grad.add_(g)``, ``x.grad.data.mul_(s)``: PyTorch's in-place methods end with ``_``."""
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr.endswith("_") and not func.attr.startswith("_")
            and _is_grad(func.value))
