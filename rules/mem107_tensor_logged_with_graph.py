"""MEM107 tensor-logged-with-graph."""

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.names import dotted_name
from memlint.lint.rule import Rule
from memlint.lint.semantic.stores import leaf_values
from memlint.lint.semantic.values import Tri

#: Logging functions called on the module itself.
MODULE_LOGGERS = frozenset({"wandb.log", "mlflow.log_metric", "mlflow.log_metrics", "mlflow.tracking.fluent.log_metric"})
#: Constructors whose result is a run/writer object with logging methods.
WRITER_CONSTRUCTORS = frozenset(
    {
        "torch.utils.tensorboard.SummaryWriter", "torch.utils.tensorboard.writer.SummaryWriter",
        "tensorboardX.SummaryWriter", "tensorboardX.writer.SummaryWriter",
    }
)
RUN_CONSTRUCTORS = frozenset({"wandb.init", "wandb.sdk.wandb_init.init"})
WRITER_METHODS = frozenset({"add_scalar", "add_scalars", "add_histogram", "add_image", "add_images", "add_embedding", "add_pr_curve"})
RUN_METHODS = frozenset({"log"})
#: Loggers that turn the value into a number or JSON during the call, so no graph outlives it:
#: torch's SummaryWriter (torch 2.13.0 torch/utils/tensorboard/summary.py ``scalar``/``histogram``
#: call ``make_np``, which is ``x.detach().cpu().numpy()`` in _convert_np.py); tensorboardX's
#: (tensorboardX 2.6.5, commit 48a5f8aee532, tensorboardX/summary.py ``scalar``/``histogram``/``image``
#: call x2num.py ``make_np``, which is ``x.data.cpu().numpy()``; ``add_scalars`` keeps
#: ``float(make_np(v))`` in ``scalar_dict``, writer.py ``__append_to_scalar_dict``; the raw value was
#: kept only in 2017, between commits 99a6411 and 01d63ff, before v0.9); wandb's ``log`` (wandb
#: sdk/interface/interface.py ``publish_partial_history`` runs ``history_dict_to_json`` on the data
#: before it returns, for ``commit=False`` too); mlflow's ``log_metric``/``log_metrics`` (mlflow
#: master, commit cada9caec9ce, mlflow/tracking/_tracking_service/client.py ``log_metric`` and
#: ``log_batch`` call metric_value_conversion_utils.py ``convert_metric_value_to_float_if_possible``,
#: which turns a tensor into ``float(x.detach().cpu().item())``; releases before it reject a tensor in
#: utils/validation.py ``_validate_metric``).  A tensor handed to them still makes every call wait for
#: the device, and wandb releases of 2019 kept the tensors (wandb/wandb#354): reported as info, not
#: as a graph kept alive.
CONVERTING_WRITER_CONSTRUCTORS = frozenset(
    {"torch.utils.tensorboard.SummaryWriter", "torch.utils.tensorboard.writer.SummaryWriter",
     "tensorboardX.SummaryWriter", "tensorboardX.writer.SummaryWriter"})
CONVERTING_MODULE_LOGGERS = frozenset({"wandb.log", "mlflow.log_metric", "mlflow.log_metrics",
                                       "mlflow.tracking.fluent.log_metric"})
#: Loggers that keep what they are given but detach it first: pytorch-pfn-extras'
#: ``reporting.report`` stores ``_nograd(v)`` (``v.detach()`` for a tensor) in the current
#: observation (v0.9.0, commit 8999d94cf7d5, pytorch_pfn_extras/reporting.py ``Reporter.report``);
#: releases before v0.3.0 stored ``value.clone()``, which keeps the graph (changed to ``detach()`` in
#: commit 39fd07116fc1, pfnet/pytorch-pfn-extras#49 "fix reporter memleak", first tag v0.3.0).
#: Reported as info: a graph is kept only with those older releases.
DETACHING_MODULE_LOGGERS = frozenset({"pytorch_pfn_extras.reporting.report"})
DETACHED_MESSAGE = ("a graph-attached tensor is reported to pytorch-pfn-extras: releases from 0.3.0 detach it, "
                    "older ones keep its graph (pfnet/pytorch-pfn-extras#49); report `.item()` or `.detach()`")
CONVERTED_MESSAGE = ("a graph-attached tensor is passed to a logger that converts it during the call: no graph "
                     "is kept, but every call waits for the device; log `.item()` (older wandb kept the tensors)")


class TensorLoggedWithGraph(Rule):
    """## What it does
    Reports a graph-attached tensor handed to an experiment logger:
    `wandb.log({"loss": loss})` (also `run.log` on a `wandb.init()` run),
    `writer.add_scalar(tag, loss)` on a TensorBoard/tensorboardX
    `SummaryWriter`, `mlflow.log_metric(key, loss)` / `log_metrics({...})`,
    including a metrics dict filled earlier in the same function.

    ## Why is this bad?
    A logger that keeps what it is given (older wandb releases:
    wandb/wandb#354) keeps a tensor that still carries its autograd graph —
    every activation of that step — alive for as long as it holds it.
    torch's own `SummaryWriter`, tensorboardX's, current wandb and mlflow
    convert the value during the call (torch 2.13.0
    `torch/utils/tensorboard/_convert_np.py`; tensorboardX 2.6.5
    `x2num.py`; wandb `sdk/interface/interface.py`; mlflow
    `tracking/metric_value_conversion_utils.py`): no graph is kept, but
    every call waits for the device; those findings are info, not
    warnings. pytorch-pfn-extras' `ppe.reporting.report({...})` keeps the
    value in the iteration's observation, detached since v0.3.0 (a clone
    with its graph before, pfnet/pytorch-pfn-extras#49): info as well.
    A Python number costs nothing.

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
    TRIGGERS = ("wandb", "mlflow", "SummaryWriter", "experiment", "pytorch_pfn_extras")
    NEEDS_NAMES = ("wandb", "mlflow", "SummaryWriter", "experiment", "pytorch_pfn_extras")
    NEEDS_GRAPH_SOURCE = True
    FRAMEWORK = "torch"
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

    def visit_Call(self, node: ast.Call) -> None:
        logged = self._logged_values(node)
        if not logged:
            return
        semantic = self.ctx.semantic
        if semantic.grad_disabled(node):
            return
        if any(_holds_graph(semantic.value(leaf)) for leaf in leaf_values(logged)):
            if semantic.qualified(node.func) in DETACHING_MODULE_LOGGERS:
                self.report(node, DETACHED_MESSAGE, severity=Severity.INFO)
            elif self._converts_during_the_call(node):
                self.report(node, CONVERTED_MESSAGE, severity=Severity.INFO)
            else:
                self.report(node)

    def _converts_during_the_call(self, call: ast.Call) -> bool:
        if self.ctx.semantic.qualified(call.func) in CONVERTING_MODULE_LOGGERS:
            return True
        if not isinstance(call.func, ast.Attribute):
            return False
        name = dotted_name(call.func.value)
        if name is not None and name.endswith(".experiment"):
            # Lightning's TensorBoardLogger.experiment is torch's SummaryWriter, or tensorboardX's
            # when tensorboard is not installed (lightning 2.6 fabric/loggers/tensorboard.py, commit
            # 7f0c3436cd3f): both convert during the call.
            return True
        made = self._constructor(call.func.value)
        return made in CONVERTING_WRITER_CONSTRUCTORS or made in RUN_CONSTRUCTORS

    def _constructor(self, receiver: ast.expr) -> str | None:
        """The qualified constructor the receiver was made by, as the semantic model knows it."""
        return self.ctx.semantic.value(receiver).type_name

    def _logged_values(self, call: ast.Call) -> list[ast.expr]:
        qualified = self.ctx.semantic.qualified(call.func)
        if qualified in DETACHING_MODULE_LOGGERS:
            return _argument(call, 0, "values")
        if qualified in MODULE_LOGGERS:
            if qualified.endswith("log_metric"):
                return _argument(call, 1, "value")
            return _argument(call, 0, "metrics") + _argument(call, 0, "data")
        if not isinstance(call.func, ast.Attribute):
            return []
        method, receiver = call.func.attr, call.func.value
        if method not in WRITER_METHODS and method not in RUN_METHODS:
            return []
        kind = self._logger_kind(receiver)
        if kind == "writer" and method in WRITER_METHODS:
            return _argument(call, 1, "scalar_value") + _argument(call, 1, "tag_scalar_dict") + _argument(call, 1, "values") + _argument(call, 1, "img_tensor")
        if kind == "run" and method in RUN_METHODS:
            return _argument(call, 0, "data")
        return []

    def _logger_kind(self, receiver: ast.expr) -> str | None:
        """"writer" for a SummaryWriter (or Lightning's ``logger.experiment``),
        "run" for a wandb run, by how the receiver was made."""
        name = dotted_name(receiver)
        if name is not None and name.endswith(".experiment"):
            return "writer"  # Lightning: `self.logger.experiment` is the wrapped writer or run
        made = self._constructor(receiver)
        if made in WRITER_CONSTRUCTORS:
            return "writer"
        if made in RUN_CONSTRUCTORS:
            return "run"
        return None


def _holds_graph(value) -> bool:
    return value.attached or (value.kind.value == "container" and value.graph is Tri.YES)


def _argument(call: ast.Call, index: int, keyword: str) -> list[ast.expr]:
    """The argument at positional ``index`` or passed as ``keyword`` (empty list when absent)."""
    positional = [arg for arg in call.args if not isinstance(arg, ast.Starred)]
    if index < len(positional):
        return [positional[index]]
    return [named.value for named in call.keywords if named.arg == keyword]
