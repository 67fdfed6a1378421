"""MEM206 deprecated-amp-api."""

from __future__ import annotations

import ast
import re

from memlint.lint.diagnostic import Fix, Severity
from memlint.lint.names import dotted_name
from memlint.lint.patterns import module_spelling
from memlint.lint.rule import Rule
from memlint.lint.syntax import FUNCTION_TYPES

#: Deprecated name -> (device string, new attribute under ``torch.amp``), per torch 2.4's deprecation warnings.
DEPRECATED = {
    "torch.cuda.amp.autocast": ("cuda", "autocast"),
    "torch.cuda.amp.GradScaler": ("cuda", "GradScaler"),
    "torch.cpu.amp.autocast": ("cpu", "autocast"),
    "torch.cpu.amp.GradScaler": ("cpu", "GradScaler"),
}
#: A test that checks the installed torch: names like ``_TORCH_GREATER_EQUAL_2_4``
#: (Lightning), ``TORCH_VERSION``, ``torch.__version__``, ``packaging.version``,
#: ``is_torch_greater_or_equal`` (transformers).
VERSION_TEST = re.compile(r"version|torch_(?:greater|less|ge|gt|le|lt|\d)", re.IGNORECASE)
#: A version name for "older than" (``_TORCH_LESS_EQUAL_2_3``, ``TORCH_LT_2_4``).
OLDER_NAME = re.compile(r"(?:^|_)(?:less|lt|older|below|before)(?:_|$)", re.IGNORECASE)
#: What :func:`_version_guard` finds: only an old torch runs the call / a version test encloses it.
FALLBACK, GUARDED = "fallback", "guarded"
#: Exceptions an old torch raises for the new API: ``torch.amp.GradScaler`` is missing
#: before torch 2.3 (AttributeError; accelerate's ``utils/modeling.py`` guards it with
#: ``is_torch_version(">=", "2.3")``), a ``device`` argument an older signature refuses
#: (TypeError), ImportError for a ``from torch.amp import ...``;
#: ``Exception``/``BaseException``/bare catch them too.
FALLBACK_ERRORS = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError", "TypeError", "Exception",
                             "BaseException"})
#: ``torch.cuda.amp.autocast(enabled, dtype, cache_enabled)``: positional order of the old signature.
_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")


class DeprecatedAmpApi(Rule):
    """## What it does
    Reports calls of the deprecated device-specific AMP aliases
    `torch.cuda.amp.autocast(...)`, `torch.cuda.amp.GradScaler(...)` (and
    their `torch.cpu.amp` twins), however they are imported, including as
    decorators.

    ## Why is this bad?
    Since PyTorch 2.4 these aliases emit a `FutureWarning` on every call
    (an `autocast` in a training step warns every step) and they are slated
    for removal. `torch.amp.autocast("cuda", ...)` and
    `torch.amp.GradScaler("cuda", ...)` are the same objects with the device
    made explicit.

    ## Example
    ```python
    scaler = torch.cuda.amp.GradScaler()
    with torch.cuda.amp.autocast(dtype=torch.bfloat16):
        loss = model(x)
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.amp.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    ```

    ## Fix safety
    The fix is safe: it calls the documented replacement with the device
    string first and every other argument kept (positional `autocast`
    arguments become keywords, since the new signature starts with the
    device). It spells `torch` the way the file imports it (`import torch
    as T` gives `T.amp.autocast`). A name imported with `from torch.cuda.amp
    import autocast` (or `from torch.cuda import amp`) is rewritten only
    when the file also imports `torch` itself; when every use of that name
    is a deprecated call with a fix, the fix rewrites them all and removes
    the name from its import (the whole line when nothing else is imported
    there). There is no fix otherwise, nor for calls with `*args`.

    A call inside a branch of an `if` or conditional expression that tests
    the torch version (a name with `version`, `__version__`,
    `_TORCH_GREATER_EQUAL_2_4`, `hasattr(torch.amp, ...)`) gets no fix
    either: the rewrite could break the torch versions the guard is for.

    ## Known problems
    A deliberate fallback for an old torch is not reported: a call in the
    branch that such a version test selects for an old torch
    (`X if _TORCH_GREATER_EQUAL_2_4 else torch.cuda.amp.GradScaler()`, the
    body of `if torch_version < ...:`), or in an `except` handler for
    `AttributeError`, `ImportError`, `TypeError` or `Exception` (the handler
    that runs when `torch.amp` is missing). On a torch that deprecates the
    alias that code does not run, and rewriting it would call the very API
    the old torch lacks. The direction of the test is read from `not`, `<`
    and names such as `_LESS_`; an equality test counts as direction
    unknown (reported, no fix). Only calls are reported: a bare reference such as
    `functools.partial(torch.cuda.amp.autocast, ...)` is not.

    ## References
    - [Automatic Mixed Precision package (torch.amp)](https://pytorch.org/docs/stable/amp.html)
    - [PyTorch 2.4 release notes: torch.cuda.amp deprecation](https://github.com/pytorch/pytorch/releases/tag/v2.4.0)
    """

    CODE = "MEM206"
    NAME = "deprecated-amp-api"
    MESSAGE = "deprecated AMP alias: use `torch.amp` with the device type"
    SEVERITY = Severity.INFO
    FIX_TITLE = "Use `torch.amp` with an explicit device type"
    TRIGGERS = ("amp",)
    NEEDS_NAMES = ("amp",)
    FRAMEWORK = "torch"
    VALID = (
        "import torch\nwith torch.amp.autocast('cuda'):\n    pass\n",
        "import torch\nscaler = torch.amp.GradScaler('cuda')\n",
        "import torch\nwith torch.autocast(device_type='cuda', dtype=torch.bfloat16):\n    pass\n",
        "from apex import amp\nmodel, opt = amp.initialize(model, opt)\nwith amp.autocast():\n    pass\n",
        "import torch\nctx = torch.cuda.amp\n",
    )
    INVALID = (
        "import torch\nwith torch.cuda.amp.autocast():  # expect: MEM206\n    pass\n",
        "import torch as T\nscaler = T.cuda.amp.GradScaler(init_scale=1024)  # expect: MEM206\n",
        "from torch.cuda.amp import autocast, GradScaler\nscaler = GradScaler()  # expect: MEM206\n",
        "from torch.cuda import amp\nclass M:\n    @amp.autocast()  # expect: MEM206\n    def forward(self, x):\n        return x\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        qualified = self.ctx.qualified(node.func)
        if qualified not in DEPRECATED:
            return
        if _version_guard(node, self.ctx.semantic) == FALLBACK:
            return
        device, attr = DEPRECATED[qualified]
        new = qualified.replace(f".{device}.amp.", ".amp.")
        self.report(node, message=f"`{qualified}` is deprecated: use `{new}(\"{device}\", ...)`", fix=self._fix(node, device, attr))

    def _torch_spelling(self, func: ast.expr) -> str | None:
        """How this file names the ``torch`` module at ``func``, or None if it cannot."""
        dotted = dotted_name(func) or ""
        head = dotted.split(".")[0]
        if self.ctx.imports.aliases.get(head) == "torch":
            return head
        return module_spelling(self.ctx, "torch")

    def _fix(self, node: ast.Call, device: str, attr: str) -> Fix | None:
        own = self._call_plan(node, device, attr)
        if own is None:
            return None
        head = (dotted_name(node.func) or "").split(".")[0]
        bound = self.ctx.imports.aliases.get(head, "")
        if bound.startswith("torch.") and bound != "torch":
            together = self._with_import_removed(head)
            if together is not None:
                return self.fix(*together, title=self.FIX_TITLE + " and remove the deprecated import")
        return self.fix(own)

    def _call_plan(self, node: ast.Call, device: str, attr: str):
        """The plan rewriting one deprecated call, or None when it has none."""
        torch_name = self._torch_spelling(node.func)
        if torch_name is None or _version_guard(node, self.ctx.semantic) is not None or any(isinstance(arg, ast.Starred) for arg in node.args):
            return None
        keywords = None  # GradScaler's positional arguments keep their order after the device
        if attr == "autocast":
            if len(node.args) > len(_AUTOCAST_POSITIONAL):
                return None
            keywords = _AUTOCAST_POSITIONAL  # autocast(enabled, dtype, ...) -> autocast(device, enabled=..., ...)
        return self.plan("rewrite_call", node, callee=f"{torch_name}.amp.{attr}", first=f'"{device}"', keywords=keywords)

    def _with_import_removed(self, head: str) -> list | None:
        """Plans that rewrite every use of the imported name ``head`` and
        remove it from its import, or None when one use is not a deprecated
        call with a fix (the import is then still needed) or the import
        shares its line with another statement."""
        imports = [n for n in ast.walk(self.ctx.module) if isinstance(n, (ast.Import, ast.ImportFrom))
                   and any((alias.asname or alias.name.split(".")[0]) == head for alias in n.names)]
        if len(imports) != 1 or not self._alone_on_its_lines(imports[0]):
            return None
        calls = {id(n.func if isinstance(n.func, ast.Name) else n.func.value): n for n in ast.walk(self.ctx.module)
                 if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))}
        plans = []
        for name in ast.walk(self.ctx.module):
            if not isinstance(name, ast.Name) or name.id != head:
                continue
            call = calls.get(id(name))
            deprecated = DEPRECATED.get(self.ctx.qualified(call.func)) if call is not None else None
            plan = self._call_plan(call, *deprecated) if deprecated else None
            if plan is None:
                return None
            plans.append(plan)
        return [*plans, self.plan("remove_import_name", imports[0], name=head)]

    def _alone_on_its_lines(self, statement: ast.stmt) -> bool:
        parent = self.ctx.semantic.parents.get(statement)
        siblings = [n for n in ast.iter_child_nodes(parent) if isinstance(n, ast.stmt) and n is not statement]
        return not any(n.lineno <= statement.end_lineno and n.end_lineno >= statement.lineno for n in siblings)


def _version_guard(node: ast.AST, semantic) -> str | None:
    """How a check of the installed torch guards ``node``:

    - :data:`FALLBACK`: ``node`` runs only on an old torch — in the branch
      of an ``if``/conditional expression that its version test selects for
      an old torch (see :func:`_true_on_new_torch`), or in an ``except``
      handler (of its own function) for an error the new API raises there;
    - :data:`GUARDED`: in a branch of a version test whose direction is
      unclear or that selects a new torch (``if torch >= 1.6:`` from before
      ``torch.amp``): still a deprecated call, but rewriting it could break
      the torch versions the guard is for;
    - None: no such check around it."""
    child, in_own_unit, found = node, True, None
    for ancestor in semantic.ancestors(node):
        if isinstance(ancestor, (ast.If, ast.IfExp)) and child is not ancestor.test and _tests_version(ancestor.test):
            new_when_true = _true_on_new_torch(ancestor.test)
            in_body = child is ancestor.body or (isinstance(ancestor.body, list) and child in ancestor.body)
            if new_when_true is not None and in_body != new_when_true:
                return FALLBACK  # a function defined in such a branch is the fallback too
            found = GUARDED
        if in_own_unit and isinstance(ancestor, ast.ExceptHandler) and _catches_fallback_error(ancestor):
            return FALLBACK
        in_own_unit = in_own_unit and not isinstance(ancestor, (*FUNCTION_TYPES, ast.Lambda, ast.ClassDef))
        child = ancestor
    return found


def _true_on_new_torch(test: ast.expr) -> bool | None:
    """Whether ``test`` holds on a newer torch: each ``not``, ``<``/``<=``
    (the version on the left, as written in practice), ``"<"`` argument
    (``is_torch_version("<", "2.3")``) or ``less``/``lt``/``older`` name part
    flips it; None for an equality test, whose direction is unknown."""
    flips = 0
    for node in ast.walk(test):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            flips += 1
        elif isinstance(node, ast.Compare):
            if any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
                return None
            flips += sum(isinstance(op, (ast.Lt, ast.LtE)) for op in node.ops)
        elif isinstance(node, ast.Constant) and node.value in ("<", "<="):
            flips += 1
        else:
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
            flips += bool(OLDER_NAME.search(name))
    return flips % 2 == 0


def _tests_version(test: ast.expr) -> bool:
    """A test that reads the torch version or probes for the new API (``hasattr(torch.amp, ...)``)."""
    for node in ast.walk(test):
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name is not None and VERSION_TEST.search(name):
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr" and node.args
                and (dotted_name(node.args[0]) or "").split(".")[0] in ("torch", "amp")):
            return True
    return False


def _catches_fallback_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((dotted_name(error) or "").rsplit(".", 1)[-1] in FALLBACK_ERRORS for error in caught)
