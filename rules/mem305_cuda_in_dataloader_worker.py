"""MEM305 cuda-in-dataloader-worker."""

import libcst as cst

from memlint.lint.dataflow import call_method_name, keyword_arg
from memlint.lint.diagnostic import Severity
from memlint.lint.names import dotted_name
from memlint.lint.patterns import is_dataset_class
from memlint.lint.rule import Rule
from memlint.lint.walk import visit as walk_visit

DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
WORKER_METHODS = frozenset({"__getitem__", "__getitems__", "__iter__"})
WORKER_ARGUMENTS = frozenset({"collate_fn", "worker_init_fn"})
#: ``torch.cuda`` functions that do not create a CUDA context.
CONTEXT_FREE = frozenset({"torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.is_initialized"})
ACCELERATORS = ("cuda", "mps", "xpu")
MAX_HELPER_DEPTH = 3


class CudaInDataloaderWorker(Rule):
    """## What it does
    Reports CUDA work in code that `DataLoader` worker processes run: the
    `__getitem__`/`__getitems__`/`__iter__` of a `Dataset` class, and the
    functions passed as `collate_fn=` or `worker_init_fn=` to a
    `DataLoader` in the same file — including local helpers they call.
    CUDA work is `.cuda()`, `.to("cuda")` / `.to(device)` where `device`
    is visibly a CUDA device, `torch.cuda.*` calls that create a context,
    and factories called with a CUDA `device=`.

    ## Why is this bad?
    Each worker is a separate process. Under the default `fork` start
    method, touching CUDA in a forked child fails ("Cannot re-initialize
    CUDA in forked subprocess"); under `spawn`, every worker creates its
    own CUDA context, hundreds of MiB of device memory each, and the
    tensors it returns must be shared across processes. Moving the batch in
    the training loop costs nothing extra.

    ## Example
    ```python
    class Frames(Dataset):
        def __getitem__(self, i):
            return torch.from_numpy(self.frames[i]).cuda()

    loader = DataLoader(Frames(), batch_size=8, num_workers=4)
    ```

    ## Use instead
    ```python
    class Frames(Dataset):
        def __getitem__(self, i):
            return torch.from_numpy(self.frames[i])

    loader = DataLoader(Frames(), batch_size=8, num_workers=4, pin_memory=True)
    for batch in loader:
        batch = batch.cuda(non_blocking=True)
    ```

    ## Known problems
    When every `DataLoader` in the file that uses the dataset or function
    runs in the main process (no `num_workers`, or `num_workers=0`), nothing
    is reported: the code is correct as written, although it breaks the day
    workers are enabled. A dataset with no `DataLoader` in the same file is
    reported, since its loader is not visible. A `device` variable counts as
    CUDA only when the file visibly assigns it a CUDA device.

    ## References
    - [torch.utils.data: multi-process data loading](https://pytorch.org/docs/stable/data.html#multi-process-data-loading)
    - [CUDA in multiprocessing](https://pytorch.org/docs/stable/notes/multiprocessing.html#cuda-in-multiprocessing)
    """

    CODE = "MEM305"
    NAME = "cuda-in-dataloader-worker"
    MESSAGE = "CUDA work in code that DataLoader workers run: each worker creates its own CUDA context or fails after fork"
    SEVERITY = Severity.ERROR
    TRIGGERS = ("__getitem", "__iter__", "collate_fn", "worker_init_fn")
    NEEDS_NAMES = ("__getitem__", "__getitems__", "__iter__", "collate_fn", "worker_init_fn")
    VALID = (
        "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __getitem__(self, i):\n        return torch.as_tensor(self.x[i])\n",
        "import torch\nfrom torch.utils.data import Dataset, DataLoader\nclass D(Dataset):\n    def __getitem__(self, i):\n        return self.x[i].cuda()\nloader = DataLoader(D(), batch_size=4, num_workers=0)\n",
        "import torch\nfrom torch.utils.data import DataLoader\ndef collate(batch, device='cpu'):\n    return torch.stack(batch).to(device)\nloader = DataLoader(ds, collate_fn=collate, num_workers=4)\n",
        "import torch\nclass Store:\n    def __getitem__(self, i):\n        return self.x[i].cuda()\n",
    )
    INVALID = (
        "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __getitem__(self, i):\n        return self.x[i].cuda()  # expect: MEM305\n",
        "import torch\nfrom torch.utils.data import DataLoader\ndef collate(batch):\n    return torch.stack(batch).to('cuda')  # expect: MEM305\nloader = DataLoader(ds, collate_fn=collate, num_workers=4)\n",
        "import torch\nimport torch.utils.data as tud\ndef seed(worker_id):\n    torch.cuda.manual_seed(worker_id)  # expect: MEM305\nloader = tud.DataLoader(ds, worker_init_fn=seed, num_workers=2)\n",
        "import torch\nfrom torch.utils.data import IterableDataset\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nclass S(IterableDataset):\n    def __iter__(self):\n        for x in self.src:\n            yield self._load(x)\n    def _load(self, x):\n        return torch.zeros(3, device=device) + x  # expect: MEM305\n",
    )

    def visit_Module(self, node: cst.Module) -> None:
        self._loaders = _DataLoaderCalls(self.ctx)
        walk_visit(node, self._loaders)
        reported: set[cst.CSTNode] = set()
        for function in self._worker_functions(node):
            for call in self._cuda_calls(function, depth=0, seen=set()):
                if call not in reported:
                    reported.add(call)
                    self.report(call)

    def _worker_functions(self, module: cst.Module) -> list[cst.FunctionDef | cst.Lambda]:
        flow = self.ctx.dataflow
        found: list[cst.FunctionDef | cst.Lambda] = []
        for klass in _classes(module):
            if not is_dataset_class(klass, self.ctx) or self._main_process_only(klass.name.value):
                continue
            found.extend(m for m in _methods(klass) if m.name.value in WORKER_METHODS)
        for call, argument in self._loaders.worker_arguments:
            if _num_workers_zero(call):
                continue
            target = argument
            if isinstance(target, cst.Call) and (self.ctx.qualified(target.func) or "").endswith("partial") and target.args:
                target = target.args[0].value
            if isinstance(target, cst.Lambda):
                found.append(target)
                continue
            if isinstance(target, cst.Call):  # Collator(...) -> Collator.__call__
                klass = _class_named(module, dotted_name(target.func))
                if klass is not None:
                    found.extend(m for m in _methods(klass) if m.name.value == "__call__")
                continue
            name = dotted_name(target)
            if name is not None and name.split(".")[-1] in flow.functions:
                found.append(flow.functions[name.split(".")[-1]])
        return found

    def _main_process_only(self, class_name: str) -> bool:
        """Every DataLoader over this dataset in the file loads in the main process."""
        loaders = self._loaders.loaders_over(class_name)
        return bool(loaders) and all(_num_workers_zero(call) for call in loaders)

    def _cuda_calls(self, function, depth: int, seen: set) -> list[cst.Call]:
        if function in seen or depth > MAX_HELPER_DEPTH:
            return []
        seen.add(function)
        finder = _CudaWork(self, function)
        walk_visit(function.body, finder)
        calls = list(finder.calls)
        for helper in finder.helpers:
            calls.extend(self._cuda_calls(helper, depth + 1, seen))
        return calls

    def is_cuda_device(self, expr: cst.BaseExpression, function, depth: int = 0) -> bool:
        """True when ``expr`` visibly denotes a CUDA (or other accelerator) device."""
        if depth > 3:
            return False
        if isinstance(expr, cst.SimpleString):
            text = expr.evaluated_value if isinstance(expr.evaluated_value, str) else ""
            return text.startswith(ACCELERATORS)
        if isinstance(expr, cst.IfExp):
            return self.is_cuda_device(expr.body, function, depth + 1) or self.is_cuda_device(expr.orelse, function, depth + 1)
        if isinstance(expr, cst.Call):
            if self.ctx.qualified(expr.func) == "torch.device" and expr.args:
                return self.is_cuda_device(expr.args[0].value, function, depth + 1)
            return self.ctx.qualified(expr.func) == "torch.cuda.current_device"
        if isinstance(expr, cst.Integer):
            return False
        name = dotted_name(expr)
        if name is None:
            return False
        flow = self.ctx.dataflow
        owner = self.ctx.module
        if name.startswith("self."):  # the attribute of the worker's own class
            owner = next((a for a in flow.ancestors(function) if isinstance(a, cst.ClassDef)), self.ctx.module)
        return any(self.is_cuda_device(value, flow.scope_node(value), depth + 1) for value in _bindings(owner, function, name))


class _CudaWork(cst.CSTVisitor):
    """CUDA calls in one worker function, and the local helpers it calls."""

    def __init__(self, rule: CudaInDataloaderWorker, function) -> None:
        self.rule = rule
        self.ctx = rule.ctx
        self.function = function
        self.calls: list[cst.Call] = []
        self.helpers: list[cst.FunctionDef] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self.ctx.qualified(node.func) or ""
        method = call_method_name(node)
        if qualified.startswith("torch.cuda.") and qualified not in CONTEXT_FREE and not qualified.startswith("torch.cuda.amp"):
            self.calls.append(node)
        elif method == "cuda":
            self.calls.append(node)
        elif method == "to" and any(
            (arg.keyword is None or arg.keyword.value == "device") and self.rule.is_cuda_device(arg.value, self.function) for arg in node.args
        ):
            self.calls.append(node)
        elif (device := keyword_arg(node, "device")) is not None and self.rule.is_cuda_device(device.value, self.function):
            self.calls.append(node)
        else:
            self._follow(node)

    def _follow(self, node: cst.Call) -> None:
        functions = self.rule.ctx.dataflow.functions
        if isinstance(node.func, cst.Name) and node.func.value in functions and self.ctx.qualified(node.func) == node.func.value:
            self.helpers.append(functions[node.func.value])
        elif isinstance(node.func, cst.Attribute) and dotted_name(node.func.value) == "self" and node.func.attr.value in functions:
            self.helpers.append(functions[node.func.attr.value])


class _DataLoaderCalls(cst.CSTVisitor):
    """DataLoader calls of the file, the worker functions passed to them, and the datasets they load."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.calls: list[cst.Call] = []
        self.worker_arguments: list[tuple[cst.Call, cst.BaseExpression]] = []
        self.constructed: dict[str, set[str]] = {}  # variable -> class names assigned to it

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.qualified(node.func) not in DATALOADERS:
            return
        self.calls.append(node)
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in WORKER_ARGUMENTS:
                self.worker_arguments.append((node, arg.value))

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call):
            class_name = dotted_name(node.value.func)
            for target in node.targets:
                name = dotted_name(target.target)
                if name is not None and class_name is not None:
                    self.constructed.setdefault(name, set()).add(class_name.split(".")[-1])

    def loaders_over(self, class_name: str) -> list[cst.Call]:
        result = []
        for call in self.calls:
            dataset = keyword_arg(call, "dataset")
            positional = [arg for arg in call.args if arg.keyword is None]
            expr = dataset.value if dataset is not None else positional[0].value if positional else None
            if isinstance(expr, cst.Call) and (dotted_name(expr.func) or "").split(".")[-1] == class_name:
                result.append(call)
            elif expr is not None and class_name in self.constructed.get(dotted_name(expr) or "", set()):
                result.append(call)
        return result


def _num_workers_zero(call: cst.Call) -> bool:
    workers = keyword_arg(call, "num_workers")
    if workers is None:
        positional = [arg for arg in call.args if arg.keyword is None]
        if len(positional) > 6:  # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, ...)
            workers = positional[5]
        else:
            return True
    return isinstance(workers.value, cst.Integer) and workers.value.value == "0"


def _classes(module: cst.Module) -> list[cst.ClassDef]:
    collector = _ClassCollector()
    walk_visit(module, collector)
    return collector.classes


class _ClassCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.classes: list[cst.ClassDef] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.append(node)


def _class_named(module: cst.Module, name: str | None) -> cst.ClassDef | None:
    if name is None:
        return None
    return next((klass for klass in _classes(module) if klass.name.value == name.split(".")[-1]), None)


def _methods(klass: cst.ClassDef) -> list[cst.FunctionDef]:
    body = klass.body.body if isinstance(klass.body, cst.IndentedBlock) else []
    return [statement for statement in body if isinstance(statement, cst.FunctionDef)]


def _bindings(owner: cst.CSTNode, function, name: str) -> list[cst.BaseExpression]:
    """Values bound to ``name``: for a plain name, in ``function`` (parameter
    defaults included) and at the top level of the module ``owner``; for
    ``self.x``, anywhere in ``owner`` (the method's class)."""
    finder = _Bindings(name)
    if name.startswith("self."):
        walk_visit(owner, finder)
        return finder.values
    if isinstance(function, cst.FunctionDef):
        params = function.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.name.value == name and param.default is not None:
                finder.values.append(param.default)
        walk_visit(function.body, finder)
    for statement in owner.body:
        if isinstance(statement, cst.SimpleStatementLine):
            walk_visit(statement, finder)
    return finder.values


class _Bindings(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.values: list[cst.BaseExpression] = []

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if dotted_name(target.target) == self.name:
                self.values.append(node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None and dotted_name(node.target) == self.name:
            self.values.append(node.value)
