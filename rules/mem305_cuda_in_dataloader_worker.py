"""MEM305 cuda-in-dataloader-worker."""

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.names import dotted_name
from memlint.lint.rule import Rule
from memlint.lint.semantic import frameworks as fw
from memlint.lint.semantic import torch_ops as ops
from memlint.lint.semantic.operations import device_of_value
from memlint.lint.semantic.values import Tri
from memlint.lint.syntax import FUNCTION_TYPES, call_arguments, is_constant, keyword_arg, string_value
from memlint.lint.walk import Visitor, visit as walk_visit
from memlint.lint.signatures import parameter_defaults

DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
WORKER_METHODS = frozenset({"__getitem__", "__getitems__", "__iter__"})
WORKER_ARGUMENTS = frozenset({"collate_fn", "worker_init_fn"})
#: Dataset constructor arguments whose callables the dataset's ``__getitem__`` runs in the workers
#: (torchvision datasets, ``datasets.Dataset.set_transform``, most in-file datasets).
TRANSFORM_ARGUMENTS = frozenset({"transform", "transforms", "target_transform", "preprocess", "preprocessor"})
#: ``torch.cuda`` functions that do not create a CUDA context.
CONTEXT_FREE = frozenset({"torch.cuda.is_available", "torch.cuda.device_count", "torch.cuda.is_initialized"})
ACCELERATORS = ("cuda", "mps", "xpu")
MAX_HELPER_DEPTH = 3


class CudaInDataloaderWorker(Rule):
    """## What it does
    Reports CUDA work in code that `DataLoader` worker processes run: the
    `__getitem__`/`__getitems__`/`__iter__` of a `Dataset` class, the
    functions passed as `collate_fn=` or `worker_init_fn=` to a
    `DataLoader` in the same file (a bound method of an instance of the
    file's class included: `collate_fn=batcher.collate`), and the callables passed as
    `transform=`/`target_transform=` to a dataset that such a `DataLoader`
    loads, and the callables given to `.map(...)`/`.collate(...)`/`.filter(...)`
    of a torchdata datapipe that a `DataLoader2` of the file runs with a
    `MultiProcessingReadingService` of one or more workers — including
    helpers of the same file they call.
    CUDA work is `.cuda()`, `.to("cuda")` / `.to(device)` where `device`
    is visibly a CUDA device, `torch.cuda.*` calls that create a context,
    and factories called with a CUDA `device=`: a visibly CUDA one, or a
    device handed to the worker by the code that sets it up (a parameter,
    or `self.device` stored from one) that the file does not show to be
    the CPU; and, when the module's own code sets the default device to an
    accelerator (`torch.set_default_device("cuda")`, which a forked worker
    inherits), a tensor factory called without `device=`.

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
    reported, since its loader is not visible. A `device` variable given to
    `.to(...)` counts as CUDA only when the file visibly assigns it a CUDA
    device; one given as a factory's `device=`, in code that a `DataLoader`
    of the file runs in workers, counts unless the file shows it to be the
    CPU (a CPU default, `Collator(device="cpu")`): a worker is handed a
    device to put its batch on the run's device. A sample's own `x.device`
    never counts.

    ## References
    - [torch.utils.data: multi-process data loading](https://pytorch.org/docs/stable/data.html#multi-process-data-loading)
    - [CUDA in multiprocessing](https://pytorch.org/docs/stable/notes/multiprocessing.html#cuda-in-multiprocessing)
    """

    CODE = "MEM305"
    NAME = "cuda-in-dataloader-worker"
    MESSAGE = "CUDA work in code that DataLoader workers run: each worker creates its own CUDA context or fails after fork"
    SEVERITY = Severity.ERROR
    TRIGGERS = ("__getitem", "__iter__", "collate_fn", "worker_init_fn", "transform", "ReadingService")
    NEEDS_NAMES = ("__getitem__", "__getitems__", "__iter__", "collate_fn", "worker_init_fn", "transform", "transforms",
                   "target_transform", "MultiProcessingReadingService")
    FRAMEWORK = "torch"
    VALID = (
        "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __getitem__(self, i):\n        return torch.as_tensor(self.x[i])\n",
        "import torch\nfrom torch.utils.data import Dataset, DataLoader\nclass D(Dataset):\n    def __getitem__(self, i):\n        return self.x[i].cuda()\nloader = DataLoader(D(), batch_size=4, num_workers=0)\n",
        "import torch\nfrom torch.utils.data import DataLoader\ndef collate(batch, device='cpu'):\n    return torch.stack(batch).to(device)\nloader = DataLoader(ds, collate_fn=collate, num_workers=4)\n",
        "import torch\nclass Store:\n    def __getitem__(self, i):\n        return self.x[i].cuda()\n",
        "import torch\nfrom torch.utils.data import DataLoader\nfrom torchvision.datasets import MNIST\ndef to_gpu(img):\n    return img.cuda()\nds = MNIST('data', transform=to_gpu)\nloader = DataLoader(ds, batch_size=8)\n",
    )
    INVALID = (
        "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __getitem__(self, i):\n        return self.x[i].cuda()  # expect: MEM305\n",
        "import torch\nfrom torch.utils.data import DataLoader\ndef collate(batch):\n    return torch.stack(batch).to('cuda')  # expect: MEM305\nloader = DataLoader(ds, collate_fn=collate, num_workers=4)\n",
        "import torch\nimport torch.utils.data as tud\ndef seed(worker_id):\n    torch.cuda.manual_seed(worker_id)  # expect: MEM305\nloader = tud.DataLoader(ds, worker_init_fn=seed, num_workers=2)\n",
        "import torch\nfrom torch.utils.data import IterableDataset\ndevice = torch.device('cuda' if torch.cuda.is_available() else 'cpu')\nclass S(IterableDataset):\n    def __iter__(self):\n        for x in self.src:\n            yield self._load(x)\n    def _load(self, x):\n        return torch.zeros(3, device=device) + x  # expect: MEM305\n",
        "import torch\nfrom torch.utils.data import DataLoader\nfrom torchvision.datasets import MNIST\ndef to_gpu(img):\n    return img.cuda()  # expect: MEM305\nds = MNIST('data', transform=to_gpu)\nloader = DataLoader(ds, batch_size=8, num_workers=4)\n",
    )

    def visit_Module(self, node: ast.Module) -> None:
        self._classes = self.ctx.index.of_type(ast.ClassDef)
        self._loaders = _DataLoaderCalls(self.ctx)
        walk_visit(node, self._loaders)
        reported: set[ast.Call] = set()
        for function, loader_seen in self._worker_functions():
            for call in self._cuda_calls(function, depth=0, seen=set(), handed=loader_seen):
                if call not in reported:
                    reported.add(call)
                    self.report(call)

    def _worker_functions(self) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, bool]]:
        """The functions workers run, each with whether a ``DataLoader`` of
        the file with workers is seen to run it (a dataset whose loader is
        elsewhere: False)."""
        found: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, bool]] = []
        semantic = self.ctx.semantic
        for klass in self._classes:
            info = semantic.classes.of(klass)
            if info is not None and "dataset" in info.roles and not self._main_process_only(klass.name):
                loader_seen = bool(self._loaders.loaders_over(klass.name))
                found.extend((m, loader_seen) for m in _methods(klass) if m.name in WORKER_METHODS)
        for call, argument in self._loaders.worker_arguments:
            if not _num_workers_zero(call):
                found.extend((f, True) for f in self._functions_passed(argument))
        for loader, transform in self._loaders.dataset_transforms():
            if not _num_workers_zero(loader):
                found.extend((f, True) for f in self._functions_passed(transform))
        for callback in self._datapipe_worker_callbacks():
            found.extend((f, True) for f in self._functions_passed(callback))
        return found

    def _datapipe_worker_callbacks(self) -> list[ast.expr]:
        """The callables given to ``.map``/``.collate``/``.filter`` of a datapipe
        chain that a ``DataLoader2`` of the file runs with a reading service
        that has worker processes (``MultiProcessingReadingService(num_workers=4)``):
        each worker runs the replicated pipeline, these functions included."""
        found = []
        for loader in self.ctx.index.of_type(ast.Call):
            spec = fw.DATAPIPE_LOADERS.get(self.ctx.qualified(loader.func) or "")
            if spec is None or not self._has_worker_service(_argument(loader, *spec)):
                continue
            found.extend(self._chain_callbacks(_argument(loader, "datapipe", 0), 0))
        return found

    def _assigned_before(self, name: ast.Name) -> list[ast.expr]:
        """The values of the ``name = ...`` statements of its scope written before ``name``."""
        semantic = self.ctx.semantic
        position = semantic.index.position_of(name)
        values = []
        for binding in semantic.scopes.bindings_of(name.id, semantic.scopes.scope_for(name)):
            statement = semantic.parents.get(binding.node)
            at = semantic.index.position_of(binding.node)
            if isinstance(statement, ast.Assign) and at is not None and position is not None and at < position:
                values.append(statement.value)
        return values

    def _has_worker_service(self, service: ast.expr | None, depth: int = 0) -> bool:
        """``service`` is a reading service with worker processes (a count that is not 0)."""
        if isinstance(service, ast.Name) and depth < MAX_HELPER_DEPTH:
            assigned = self.ctx.semantic.assignment_before(service)
            return assigned is not None and self._has_worker_service(assigned.value, depth + 1)
        if not isinstance(service, ast.Call):
            return False
        spec = fw.WORKER_READING_SERVICES.get(self.ctx.qualified(service.func) or "")
        if spec is None:
            return False
        workers = _argument(service, *spec)
        return workers is not None and not is_constant(workers, 0) and self.ctx.semantic.constants.value(workers) != 0

    def _chain_callbacks(self, pipe: ast.expr | None, depth: int) -> list[ast.expr]:
        """The element callables of the functional calls that build ``pipe``
        (``FileLister(...).map(decode).collate(collate_fn)``), through names
        assigned the chain's parts."""
        found = []
        while pipe is not None and depth <= MAX_HELPER_DEPTH:
            if isinstance(pipe, ast.Name):  # every step assigned to it before (`pipe = pipe.map(f)`)
                for value in self._assigned_before(pipe):
                    found.extend(self._chain_callbacks(value, depth + 1))
                break
            if not (isinstance(pipe, ast.Call) and isinstance(pipe.func, ast.Attribute)):
                break
            spec = fw.DATAPIPE_CALLBACKS.get(pipe.func.attr)
            if spec is not None:
                keywords, position = spec
                callback = next((k.value for k in pipe.keywords if k.arg in keywords), None)
                if callback is None and len(pipe.args) > position:
                    callback = pipe.args[position]
                if callback is not None:
                    found.append(callback)
            pipe = pipe.func.value
        return found

    def _functions_passed(self, argument: ast.expr, depth: int = 0) -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda]:
        """The functions a ``collate_fn=``/``worker_init_fn=``/``transform=``
        argument makes workers run: a function or lambda, ``partial(f, ...)``,
        an instance of a class of the file (its ``__call__``), the function a
        local factory returns (``make_collate(tok)``), and the members of a
        pipeline built from a list (``Compose([..., ToCuda()])``)."""
        if depth > MAX_HELPER_DEPTH:
            return []
        target = argument
        if isinstance(target, ast.Call) and (self.ctx.qualified(target.func) or "").endswith("partial") and call_arguments(target):
            target = call_arguments(target)[0]
        if isinstance(target, ast.Lambda):
            return [target]
        if isinstance(target, ast.Call):
            klass = self._class_named(dotted_name(target.func))
            if klass is not None:  # Collator(...) -> Collator.__call__
                return [m for m in _methods(klass) if m.name == "__call__"]
            factory = _local_definition(self.ctx.semantic, target.func)
            if isinstance(factory, FUNCTION_TYPES):
                return [f for returned in _returned(factory) for f in self._functions_passed(returned, depth + 1)]
            members = [e for a in call_arguments(target) if isinstance(a, (ast.List, ast.Tuple)) for e in a.elts]
            return [f for member in members for f in self._functions_passed(member, depth + 1)]
        definition = _local_definition(self.ctx.semantic, target)
        if isinstance(definition, FUNCTION_TYPES):
            return [definition]
        method = self._bound_method(target)
        if method is not None:
            return [method]
        assigned = self.ctx.semantic.assignment_before(target) if isinstance(target, ast.Name) else None
        return self._functions_passed(assigned.value, depth + 1) if assigned is not None else []

    def _bound_method(self, target: ast.expr) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The method that ``obj.method`` denotes when ``obj`` is an instance of
        a class of the file (``collate_fn=batcher.collate``)."""
        if not isinstance(target, ast.Attribute):
            return None
        semantic = self.ctx.semantic
        klass = semantic.classes.get(semantic.value(target.value).klass)
        method = klass.method(target.attr) if klass is not None else None
        return method if isinstance(method, FUNCTION_TYPES) else None

    def _class_named(self, name: str | None) -> ast.ClassDef | None:
        if name is None:
            return None
        return next((klass for klass in self._classes if klass.name == name.split(".")[-1]), None)

    def _main_process_only(self, class_name: str) -> bool:
        """Every DataLoader over this dataset in the file loads in the main process."""
        loaders = self._loaders.loaders_over(class_name)
        return bool(loaders) and all(_num_workers_zero(call) for call in loaders)

    def _cuda_calls(self, function, depth: int, seen: set, handed: bool) -> list[ast.Call]:
        """CUDA calls of ``function`` and its helpers; with ``handed``, a
        factory's ``device=`` handed in by the worker's creator counts too
        (see :meth:`is_handed_device`)."""
        if function in seen or depth > MAX_HELPER_DEPTH:
            return []
        seen.add(function)
        finder = _CudaWork(self, function, handed)
        walk_visit(function.body, finder)
        calls = list(finder.calls)
        for helper in finder.helpers:
            calls.extend(self._cuda_calls(helper, depth + 1, seen, handed))
        return calls

    def module_default_device_is_cuda(self) -> bool:
        """The module's own code sets the default device to an accelerator
        (``torch.set_default_device("cuda")``, :data:`~.frameworks.DEFAULT_DEVICE_SETTERS`):
        a forked worker inherits the setting, and every tensor factory called
        there without ``device=`` creates its tensor on the GPU (torch 2.13.0
        ``torch/__init__.py`` ``set_default_device``)."""
        found = self.__dict__.get("_default_cuda")
        if found is None:
            semantic = self.ctx.semantic
            found = any(self.ctx.qualified(call.func) == "torch.set_default_device" and call_arguments(call)
                        and semantic.unit_of(call) is self.ctx.module
                        and self.is_cuda_device(call_arguments(call)[0], self.ctx.module)
                        for call in semantic.index.of_type(ast.Call))
            self.__dict__["_default_cuda"] = found
        return found

    def is_cuda_device(self, expr: ast.expr, function, depth: int = 0) -> bool:
        """True when ``expr`` visibly denotes a CUDA (or other accelerator) device."""
        if depth > 3:
            return False
        if isinstance(expr, ast.Constant):
            return (string_value(expr) or "").startswith(ACCELERATORS)
        if isinstance(expr, ast.IfExp):
            return self.is_cuda_device(expr.body, function, depth + 1) or self.is_cuda_device(expr.orelse, function, depth + 1)
        if isinstance(expr, ast.Call):
            if self.ctx.qualified(expr.func) == "torch.device" and call_arguments(expr):
                return self.is_cuda_device(call_arguments(expr)[0], function, depth + 1)
            return self.ctx.qualified(expr.func) == "torch.cuda.current_device"
        name = dotted_name(expr)
        if name is None:
            return False
        semantic = self.ctx.semantic
        owner = self.ctx.module
        if name.startswith("self."):  # the attribute of the worker's own class
            owner = next((a for a in semantic.ancestors(function) if isinstance(a, ast.ClassDef)), self.ctx.module)
        return any(self.is_cuda_device(value, semantic.unit_of(value), depth + 1) for value in _bindings(owner, function, name))


    def is_handed_device(self, expr: ast.expr, function) -> bool:
        """``expr`` is a device handed to the worker by the code that set it up
        (a parameter, or ``self.device`` stored from one) that the semantic
        model does not show to be the CPU: a worker is given a device to put
        its batch on the run's device. Not a tensor's own ``.device``
        (``device=x.device`` names where the sample already is)."""
        name = dotted_name(expr)
        if name is None or name.count(".") > 1 or "." in name and not name.startswith("self."):
            return False
        semantic = self.ctx.semantic
        if device_of_value(expr, semantic.value(expr)) is not Tri.YES:
            return False
        owner = self.ctx.module
        if name.startswith("self."):
            owner = next((a for a in semantic.ancestors(function) if isinstance(a, ast.ClassDef)), self.ctx.module)
        return all(_from_caller(value) for value in _bindings(owner, function, name))


class _CudaWork(Visitor):
    """CUDA calls in one worker function, and the local helpers it calls."""

    def __init__(self, rule: CudaInDataloaderWorker, function, handed: bool) -> None:
        self.rule = rule
        self.ctx = rule.ctx
        self.function = function
        self.handed = handed
        self.calls: list[ast.Call] = []
        self.helpers: list[ast.FunctionDef | ast.AsyncFunctionDef] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> bool:
        return False

    def visit_Call(self, node: ast.Call) -> None:
        qualified = self.ctx.qualified(node.func) or ""
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if qualified.startswith("torch.cuda.") and qualified not in CONTEXT_FREE and not qualified.startswith("torch.cuda.amp"):
            self.calls.append(node)
        elif method == "cuda":
            self.calls.append(node)
        elif method == "to" and any(self.rule.is_cuda_device(arg, self.function) for arg in _device_arguments(node)):
            self.calls.append(node)
        elif (device := keyword_arg(node, "device")) is not None and (
                self.rule.is_cuda_device(device.value, self.function)
                or self.handed and self.rule.is_handed_device(device.value, self.function)):
            self.calls.append(node)
        elif device is None and qualified.startswith("torch.") and qualified[len("torch."):] in ops.FACTORIES \
                and self.rule.module_default_device_is_cuda():
            self.calls.append(node)  # `torch.tensor(...)` after a module-level `torch.set_default_device("cuda")`
        else:
            self._follow(node)

    def _follow(self, node: ast.Call) -> None:
        semantic = self.ctx.semantic
        helper = _local_definition(semantic, node.func)
        if helper is None and isinstance(node.func, ast.Attribute) and dotted_name(node.func.value) == "self":
            klass = semantic.class_of_method(self.function) if isinstance(self.function, FUNCTION_TYPES) else None
            helper = klass.method(node.func.attr) if klass is not None else None
        if isinstance(helper, FUNCTION_TYPES):
            self.helpers.append(helper)


class _DataLoaderCalls(Visitor):
    """DataLoader calls of the file, the worker functions passed to them, and the datasets they load."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.calls: list[ast.Call] = []
        self.worker_arguments: list[tuple[ast.Call, ast.expr]] = []
        self.constructed: dict[str, set[str]] = {}  # variable -> class names assigned to it
        self.built: dict[str, list[ast.Call]] = {}  # variable -> the calls assigned to it

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified(node.func) not in DATALOADERS:
            return
        self.calls.append(node)
        for keyword in node.keywords:
            if keyword.arg in WORKER_ARGUMENTS:
                self.worker_arguments.append((node, keyword.value))

    def dataset_transforms(self) -> list[tuple[ast.Call, ast.expr]]:
        """(DataLoader call, transform callable) for each dataset built with a
        ``transform=``-like argument that a DataLoader of the file loads."""
        found = []
        for call in self.calls:
            dataset = keyword_arg(call, "dataset")
            unnamed = _unnamed_arguments(call)
            expr = dataset.value if dataset is not None else unnamed[0] if unnamed else None
            for built in self._constructions_of(expr):
                found.extend((call, k.value) for k in built.keywords if k.arg in TRANSFORM_ARGUMENTS)
        return found

    def _constructions_of(self, expr: ast.expr | None) -> list[ast.Call]:
        if isinstance(expr, ast.Call):
            return [expr]
        name = dotted_name(expr) if expr is not None else None
        return self.built.get(name, []) if name is not None else []

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Call):
            for target in node.targets:
                name = dotted_name(target)
                if name is not None:
                    self.built.setdefault(name, []).append(node.value)
            class_name = dotted_name(node.value.func)
            for target in node.targets:
                name = dotted_name(target)
                if name is not None and class_name is not None:
                    self.constructed.setdefault(name, set()).add(class_name.split(".")[-1])

    def loaders_over(self, class_name: str) -> list[ast.Call]:
        result = []
        for call in self.calls:
            dataset = keyword_arg(call, "dataset")
            unnamed = _unnamed_arguments(call)
            expr = dataset.value if dataset is not None else unnamed[0] if unnamed else None
            if isinstance(expr, ast.Call) and (dotted_name(expr.func) or "").split(".")[-1] == class_name:
                result.append(call)
            elif expr is not None and class_name in self.constructed.get(dotted_name(expr) or "", set()):
                result.append(call)
        return result


def _from_caller(value: ast.expr) -> bool:
    """A device binding that passes on what a caller gave: a plain name (a
    parameter) or ``self.x``; not a sample's ``x.device``, a call or a literal
    (literals are judged by :meth:`CudaInDataloaderWorker.is_cuda_device`)."""
    if isinstance(value, ast.Name):
        return True
    return isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self"


def _returned(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    """What ``function``'s own ``return`` statements return (not those of functions nested in it)."""
    found = []
    stack = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            found.append(node.value)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return found


def _local_definition(semantic, func: ast.expr):
    """The ``def`` (or lambda) of this file that a plain name refers to, by scope."""
    if isinstance(func, ast.Lambda):
        return func
    if not isinstance(func, ast.Name):
        return None
    from memlint.lint.semantic.scopes import BindingKind

    bindings = semantic.scopes.bindings_of(func.id, semantic.scopes.scope_for(func))
    definitions = [b.node for b in bindings if b.kind is BindingKind.FUNCTION]
    return definitions[0] if len(definitions) == 1 and len(bindings) == 1 else None


def _unnamed_arguments(call: ast.Call) -> list[ast.expr]:
    """The arguments passed without a name, in source order: positional ones, ``*xs`` and ``**kw`` (unwrapped)."""
    positional = [arg.value if isinstance(arg, ast.Starred) else arg for arg in call.args]
    return positional + [keyword.value for keyword in call.keywords if keyword.arg is None]


def _device_arguments(call: ast.Call) -> list[ast.expr]:
    """The arguments of ``x.to(...)`` that may be a device: unnamed ones and ``device=``."""
    return [*_unnamed_arguments(call), *(keyword.value for keyword in call.keywords if keyword.arg == "device")]


def _argument(call: ast.Call, keyword: str, position: int) -> ast.expr | None:
    """The argument of ``call`` given by ``keyword`` or at ``position`` (no ``*args``), or None."""
    found = keyword_arg(call, keyword)
    if found is not None:
        return found.value
    if len(call.args) > position and not any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
        return call.args[position]
    return None


def _num_workers_zero(call: ast.Call) -> bool:
    workers = keyword_arg(call, "num_workers")
    if workers is not None:
        return is_constant(workers.value, 0)
    unnamed = _unnamed_arguments(call)
    if len(unnamed) > 6:  # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, ...)
        return is_constant(unnamed[5], 0)
    return True


def _methods(klass: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [statement for statement in klass.body if isinstance(statement, FUNCTION_TYPES)]


def _bindings(owner: ast.AST, function, name: str) -> list[ast.expr]:
    """Values bound to ``name``: for a plain name, in ``function`` (parameter
    defaults included) and at the top level of the module ``owner``; for
    ``self.x``, anywhere in ``owner`` (the method's class)."""
    finder = _Bindings(name)
    if name.startswith("self."):
        walk_visit(owner, finder)
        return finder.values
    if isinstance(function, FUNCTION_TYPES):
        finder.values.extend(default for parameter, default in parameter_defaults(function.args) if parameter == name)
        walk_visit(function.body, finder)
    walk_visit([statement for statement in owner.body if isinstance(statement, (ast.Assign, ast.AnnAssign))], finder)
    return finder.values


class _Bindings(Visitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.values: list[ast.expr] = []

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if dotted_name(target) == self.name:
                self.values.append(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None and dotted_name(node.target) == self.name:
            self.values.append(node.value)
