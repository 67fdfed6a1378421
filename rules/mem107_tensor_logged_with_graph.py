"""MEM107 tensor-logged-with-graph."""

import ast

from memlint.lint.dataflow import Tri
from memlint.lint.diagnostic import Severity
from memlint.lint.names import dotted_name
from memlint.lint.patterns import leaf_values
from memlint.lint.rule import Rule
from memlint.lint.syntax import call_arguments
from memlint.lint.walk import Visitor, file_memo, visit as walk_visit

#: Logging functions called on the module itself.
MODULE_LOGGERS = frozenset({"wandb.log", "mlflow.log_metric", "mlflow.log_metrics", "mlflow.tracking.fluent.log_metric"})
#: Constructors whose result is a run/writer object with logging methods.
WRITER_CONSTRUCTORS = frozenset(
    {
        "torch.utils.tensorboard.SummaryWriter", "torch.utils.tensorboard.writer.SummaryWriter",
        "tensorboardX.SummaryWriter", "tensorboardX.writer.SummaryWriter",
    }
)
RUN_CONSTRUCTORS = frozenset({"wandb.init"})
WRITER_METHODS = frozenset({"add_scalar", "add_scalars", "add_histogram", "add_image", "add_images", "add_embedding", "add_pr_curve"})
RUN_METHODS = frozenset({"log"})


class TensorLoggedWithGraph(Rule):
    """## What it does
    Reports a graph-attached tensor handed to an experiment logger:
    `wandb.log({"loss": loss})` (also `run.log` on a `wandb.init()` run),
    `writer.add_scalar(tag, loss)` on a TensorBoard/tensorboardX
    `SummaryWriter`, `mlflow.log_metric(key, loss)` / `log_metrics({...})`,
    including a metrics dict filled earlier in the same function.

    ## Why is this bad?
    Loggers buffer what they are given until the next commit or flush
    (`wandb.log(..., commit=False)` accumulates a step's values; writers
    queue events for a background thread). A tensor that still carries its
    autograd graph keeps the whole graph — every activation of that step —
    alive for as long as the logger holds it, and converting it forces a
    device synchronisation on the logging path. A Python number costs
    nothing.

    ## Example
    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        wandb.log({"train/loss": loss})
    ```

    ## Use instead
    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        wandb.log({"train/loss": loss.item()})
    ```

    ## Known problems
    Lightning's `self.log(...)` detaches what it receives and is not
    reported. A writer or run object is recognised when it is created in
    the same file (`writer = SummaryWriter(...)`, `self.writer = ...`,
    `run = wandb.init(...)`) or is a Lightning logger's `.experiment`;
    one received as a parameter is recognised only by a name ending in
    `writer` in a file that imports `SummaryWriter`. Storing attached values
    in a plain container is MEM102's finding.

    ## References
    - [wandb.log](https://docs.wandb.ai/ref/python/log)
    - [torch.utils.tensorboard.SummaryWriter.add_scalar](https://pytorch.org/docs/stable/tensorboard.html)
    - [mlflow.log_metric](https://mlflow.org/docs/latest/python_api/mlflow.html#mlflow.log_metric)
    """

    CODE = "MEM107"
    NAME = "tensor-logged-with-graph"
    MESSAGE = "a graph-attached tensor is passed to an experiment logger: log `.item()` or `.detach()` instead"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("wandb", "mlflow", "SummaryWriter", "experiment")
    NEEDS_NAMES = ("wandb", "mlflow", "SummaryWriter", "experiment")
    NEEDS_GRAPH_SOURCE = True
    VALID = (
        "import wandb\ndef f(model, loader, crit):\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        wandb.log({'loss': loss.item()})\n",
        "class M:\n    def training_step(self, batch, idx):\n        loss = self.model(batch).loss\n        self.log('train_loss', loss)\n        return loss\n",
        "from torch.utils.tensorboard import SummaryWriter\nw = SummaryWriter()\ndef f(model, loader, crit):\n    for i, (x, y) in enumerate(loader):\n        loss = crit(model(x), y)\n        loss.backward()\n        w.add_scalar('loss', loss.detach(), i)\n",
        "import logging\nlog = logging.getLogger()\ndef f(model, loader, crit, run):\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        run.log({'loss': loss})\n",
    )
    INVALID = (
        "import wandb\ndef f(model, loader, crit):\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        wandb.log({'train': {'loss': loss}})  # expect: MEM107\n",
        "from torch.utils.tensorboard import SummaryWriter\nclass T:\n    def __init__(self):\n        self.writer = SummaryWriter('runs')\n    def fit(self, model, loader, crit):\n        for i, (x, y) in enumerate(loader):\n            loss = crit(model(x), y)\n            loss.backward()\n            self.writer.add_scalar('loss', loss, i)  # expect: MEM107\n",
        "import mlflow as mf\ndef f(model, loader, crit):\n    for step, (x, y) in enumerate(loader):\n        loss = crit(model(x), y)\n        loss.backward()\n        mf.log_metric('loss', loss, step=step)  # expect: MEM107\n",
        "import wandb\ndef f(model, loader, crit):\n    run = wandb.init(project='p')\n    for x, y in loader:\n        loss = crit(model(x), y)\n        loss.backward()\n        metrics = {}\n        metrics['loss'] = loss\n        run.log(metrics)  # expect: MEM107\n",
    )

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._writers: set[str] | None = None
        self._runs: set[str] = set()

    def visit_Call(self, node: ast.Call) -> None:
        logged = self._logged_values(node)
        if not logged:
            return
        flow = self.ctx.dataflow
        if flow.grad_disabled(node):
            return
        if any(flow.value(leaf).graph is Tri.YES for leaf in self._expand(logged, node)):
            self.report(node)

    def _logged_values(self, call: ast.Call) -> list[ast.expr]:
        qualified = self.ctx.qualified(call.func)
        if qualified in MODULE_LOGGERS:
            if qualified.endswith("log_metric"):
                return _argument(call, 1, "value")
            return _argument(call, 0, "metrics") + _argument(call, 0, "data")
        method = call.func.attr if isinstance(call.func, ast.Attribute) else None
        receiver = dotted_name(call.func.value) if method is not None else None
        if receiver is None:
            return []
        self._collect_objects()
        if method in WRITER_METHODS and self._is_writer(receiver):
            return _argument(call, 1, "scalar_value") + _argument(call, 1, "tag_scalar_dict") + _argument(call, 1, "values") + _argument(call, 1, "img_tensor")
        if method in RUN_METHODS and (receiver in self._runs or receiver.endswith(".experiment")):
            return _argument(call, 0, "data")
        return []

    def _is_writer(self, receiver: str) -> bool:
        if receiver in self._writers or receiver.endswith(".experiment"):
            return True
        imports_writer = any(name in WRITER_CONSTRUCTORS for name in self.ctx.imports.aliases.values())
        return imports_writer and receiver.split(".")[-1].lower().endswith("writer")

    def _collect_objects(self) -> None:
        if self._writers is not None:
            return
        collector = _LoggerObjects(self.ctx)
        walk_visit(self.ctx.module, collector)
        self._writers = collector.writers
        self._runs = collector.runs

    def _expand(self, values: list[ast.expr], call: ast.Call) -> list[ast.expr]:
        """Leaves of the logged values; a Name bound to a dict in the same
        function contributes the values stored into it before the call."""
        leaves = []
        for leaf in leaf_values(values):
            leaves.append(leaf)
            if isinstance(leaf, ast.Name):
                leaves.extend(leaf_values(_dict_values_of(leaf.id, self.ctx.dataflow.scope_node(call), self.ctx, call)))
        return leaves


def _argument(call: ast.Call, index: int, keyword: str) -> list[ast.expr]:
    """The argument at positional ``index`` or passed as ``keyword`` (empty list when absent)."""
    positional = [arg for arg in call.args if not isinstance(arg, ast.Starred)]
    if index < len(positional):
        return [positional[index]]
    return [named.value for named in call.keywords if named.arg == keyword]


def _dict_values_of(name: str, function: ast.AST, ctx, before: ast.AST) -> list[ast.expr]:
    """The values stored into the dict ``name`` in ``function`` before ``before`` starts."""
    def collect() -> list[tuple[tuple[int, int], list[ast.expr]]]:
        collector = _DictStores(name)
        walk_visit(function, collector)
        return [(ctx.span(store)[0], values) for store, values in collector.stores]

    limit = ctx.span(before)[0]
    stores = file_memo(("dict_stores", id(function), name), collect)
    return [value for start, values in stores if start < limit for value in values]


class _DictStores(Visitor):
    """Stores into ``name``: ``name[k] = v``, ``name.update({...})``, ``name = {...}``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stores: list[tuple[ast.AST, list[ast.expr]]] = []

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Subscript) and dotted_name(target.value) == self.name:
                self.stores.append((node, [node.value]))
            elif isinstance(target, ast.Name) and target.id == self.name and isinstance(node.value, ast.Dict):
                self.stores.append((node, [node.value]))

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr == "update" and dotted_name(node.func.value) == self.name:
            self.stores.append((node, call_arguments(node)))


class _LoggerObjects(Visitor):
    """Names bound to SummaryWriter / wandb run objects anywhere in the file."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.writers: set[str] = set()
        self.runs: set[str] = set()

    def _record(self, targets: list[ast.expr], value: ast.expr) -> None:
        if not isinstance(value, ast.Call):
            return
        qualified = self.ctx.qualified(value.func)
        bucket = self.writers if qualified in WRITER_CONSTRUCTORS else self.runs if qualified in RUN_CONSTRUCTORS else None
        if bucket is None:
            return
        for target in targets:
            name = dotted_name(target)
            if name is not None:
                bucket.add(name)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._record(node.targets, node.value)

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            if item.optional_vars is not None:
                self._record([item.optional_vars], item.context_expr)
