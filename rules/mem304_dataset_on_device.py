"""MEM304 dataset-on-device."""

import ast
import builtins

from memlint.lint.diagnostic import Severity
from memlint.lint.names import dotted_name, targets_of
from memlint.lint.patterns import names_in
from memlint.lint.rule import Rule
from memlint.lint.semantic.frameworks import BATCH_LOADERS, LEGACY_CUDA_TENSOR_TYPES
from memlint.lint.semantic.operations import device_of_value
from memlint.lint.semantic.values import Kind, Tri
from memlint.lint.syntax import FOR_TYPES, FUNCTION_TYPES, call_arguments, keyword_arg
from memlint.lint.walk import Visitor, visit as walk_visit
from memlint.lint.signatures import arguments_bound, first_parameter, is_static_method, parameter_names

TENSOR_DATASETS = frozenset({"torch.utils.data.TensorDataset", "torch.utils.data.dataset.TensorDataset"})
#: Methods that only change the dtype/layout/device of a tensor: looked through to find where it came from
#: (``bool``/``byte``/``char``/``short``: "``self.bool()`` is equivalent to ``self.to(torch.bool)``",
#: torch 2.13.0 torch/_tensor_docs.py).
CONVERSIONS = frozenset({"to", "cuda", "float", "long", "half", "double", "int", "bfloat16", "contiguous", "pin_memory", "clone", "requires_grad_",
                         "unsqueeze", "squeeze", "view", "reshape", "flatten", "permute", "transpose",
                         "bool", "byte", "char", "short"})


class DatasetOnDevice(Rule):
    """## What it does
    Reports whole-dataset tensors moved to the accelerator up front: in the
    `__init__` (or a `@dataclass`'s `__post_init__`, which its `__init__`
    runs) of a `torch.utils.data.Dataset` subclass or of a class that
    hands out items or batches of its attributes (`__getitem__`, or a
    `get_batch(i)` that indexes them) or whose attribute a function of the
    file reads batch by batch in a training loop through an instance
    (`views.corr[view]`, `views: CapturedViews`), passed to `TensorDataset(...)`, or assigned
    before a loop that then walks over them batch by batch
    (`X = torch.tensor(data).cuda()` followed by `for i in range(0, len(X), bs): xb = X[i:i + bs]`,
    or handed to a `DataLoader` -- torch's or PyTorch Geometric's -- that a
    training loop then draws from; a list comprehension that moves every
    piece to the accelerator, `[g.to(device) for g in graphs]`, is such
    data whatever the pieces' type, unless they are modules),
    itself or through a function of the file it is passed to (an epoch
    function whose loop reads `X[idx]`, a sampler that slices windows
    `[x[s:s + w] for s in starts]` called from the training loop), or moved
    piece by piece in a loop over what is on disk (the entries of
    `os.scandir`/`glob`, the records of a JSON file) that keeps every piece
    past its iteration (appended to a list made before the loop or to an
    attribute, stored under a key, also inside an object it builds). In any
    method, a tensor that joins every item of a collection
    (`torch.stack([ds[i] for i in range(len(ds))])`), moved whole or entry
    by entry (`{k: v.to(device) for k, v in batch.items()}`) and kept on
    `self`, is the whole dataset too.
    A legacy CUDA tensor type (`torch.cuda.LongTensor(ids)`) places its data on
    the GPU like `.cuda()`; a tensor that `__init__` makes with a factory
    (`torch.randn(n, 3, 224, 224, device=d)`) is the data when `__getitem__`
    hands it out (whole, or an element of it), and a buffer otherwise.

    ## Why is this bad?
    The dataset then occupies accelerator memory for the whole run, next
    to the model, its gradients, the optimiser state and the activations.
    It works on small data and runs out of memory when the dataset grows;
    a `DataLoader` with `pin_memory=True` and a per-batch `.to(device,
    non_blocking=True)` overlaps the copies with compute at a fraction of
    the memory.

    ## Example
    ```python
    class SeqDataset(Dataset):
        def __init__(self, seqs, device):
            self.x = torch.as_tensor(seqs).to(device)
    ```

    ## Use instead
    ```python
    class SeqDataset(Dataset):
        def __init__(self, seqs):
            self.x = torch.as_tensor(seqs)

    for x in DataLoader(SeqDataset(seqs), batch_size=64, pin_memory=True):
        x = x.to(device, non_blocking=True)
    ```

    ## Known problems
    A dataset small enough to stay on the device on purpose (a common speed
    trick for MNIST-sized data) is reported too; suppress it with
    `# noqa: MEM304`. A name bound only to constant indices of a
    collection that a loop of the file reads by its variable
    (`first = gen[0][0]` where a loop reads `gen[i]`: one batch of a batch
    generator) is one item, not the dataset, and is not reported. Small constant tensors built from literals
    (normalisation means, masks) and attributes named like models, devices
    or statistics are not reported, nor is what a helper of the file moves
    to the device and returns when it is called once per iteration of a
    loop (one batch's tensors). Whether a value is on the accelerator
    is inferred from `.cuda()`, `.to(device)` and `device=` in the same
    file. A list comprehension that moves each piece is reported on its
    element, the expression that moves it, not on the statement's first
    line.

    ## References
    - [torch.utils.data](https://pytorch.org/docs/stable/data.html)
    - [CUDA semantics: use pinned memory buffers](https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers)
    """

    CODE = "MEM304"
    NAME = "dataset-on-device"
    MESSAGE = "a whole dataset is moved to the accelerator up front: it occupies device memory for the whole run"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("cuda", ".to(", "device")
    NEEDS_NAMES = ("cuda", "to", "device")
    FRAMEWORK = "torch"
    VALID = (
        "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __init__(self, x):\n        self.x = torch.as_tensor(x)\n    def __getitem__(self, i):\n        return self.x[i]\n",
        "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __init__(self, x, device):\n        self.x = x\n        self.mean = torch.tensor([0.5, 0.5, 0.5]).to(device)\n",
        "import torch\ndef train(model, loader, device):\n    model = model.to(device)\n    for x, y in loader:\n        x = x.to(device)\n        model(x)\n",
        "import torch\nX = torch.tensor(data).cuda()\nprint(X.sum())\n",
    )
    INVALID = (
        "import torch\nfrom torch.utils.data import Dataset as D\nclass Seqs(D):\n    def __init__(self, seqs, device='cuda'):\n        self.x = torch.as_tensor(seqs).to(device)  # expect: MEM304\n",
        "import torch\nclass ImageStore:\n    def __init__(self, images):\n        data = torch.from_numpy(images).float()\n        self.images = data.cuda()  # expect: MEM304\n    def batch(self, i, size):\n        return self.images[i * size:(i + 1) * size]\n",
        "import torch\nX_train = torch.tensor(data).cuda()  # expect: MEM304\ndef train(model, bs):\n    for i in range(0, len(X_train), bs):\n        model(X_train[i:i + bs])\n",
        "import torch\nfrom torch.utils.data import TensorDataset, DataLoader\ndef make(x, y, device):\n    ds = TensorDataset(torch.as_tensor(x).to(device), torch.as_tensor(y).to(device))  # expect: MEM304\n    return DataLoader(ds, batch_size=32)\n",
    )

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) != 1:
            return
        name = dotted_name(node.targets[0])
        if name is None or not isinstance(node.value, (ast.Call, ast.ListComp, ast.List, ast.Tuple, ast.DictComp)) \
                or not _moves_to_device(node.value, self.ctx):
            return  # cheap syntactic checks first: the rest interprets the function
        semantic = self.ctx.semantic
        if name.startswith("self.") and self._whole_collection_kept(node):
            self.report(node)
            return
        if isinstance(node.value, ast.DictComp):
            return
        converted = _converted_from_data(node.value, self.ctx)
        if not converted and not name.startswith("self."):
            return  # buffers (`torch.zeros(n, device=d)`) and results of other calls are not datasets
        if name.startswith("self."):
            function = self.ctx.enclosing(*FUNCTION_TYPES)
            if not semantic.runs_at_construction(function) or not self._serves_data(function, name.split(".", 1)[1]):
                return
            if converted:
                on_device = self._is_data_on_device(node.value)
            else:  # made here (`torch.randn(3, 224, 224, device=d)`): data only when `__getitem__` hands it out
                value = semantic.value(node.value)
                on_device = value.kind is Kind.TENSOR and value.device is Tri.YES and \
                    self._handed_out_as_item(function, name.split(".", 1)[1])
            if on_device and not semantic.enclosing_loops(node) and not self._used_as_module(name, function):
                self.report(_anchor(node))
            return
        if "." not in name and converted and self._collected_from_files(node, name):
            self.report(_anchor(node))
            return
        if "." in name or semantic.enclosing_loops(node) or self._one_item_of_batches(node.value):
            return
        batched = self._iterated_in_batches(name, node, semantic.unit_of(node)) or self._batched_by_callers(name, node)
        if batched and self._is_data_on_device(node.value):
            self.report(_anchor(node))

    def _one_item_of_batches(self, expr: ast.expr) -> bool:
        """What ``expr`` converts is a name bound only to ``c[k]...`` (constant
        indices) of a collection ``c`` that a loop of the file indexes by its
        variable (``for i in range(len(gen)): x, y = gen[i]``): ``c`` yields a
        batch per index, so ``gen[0][0]`` is one batch, not the dataset."""
        source = _before_conversions(expr)
        if isinstance(source, ast.Call) and self.ctx.qualified(source.func) in DATA_CONVERSIONS and source.args:
            source = _before_conversions(source.args[0])
        if not isinstance(source, ast.Name):
            return False
        semantic = self.ctx.semantic
        bindings = semantic.scopes.bindings_of(source.id, semantic.scopes.scope_for(source))
        statements = [semantic.parents.get(binding.node) for binding in bindings]
        if not statements or not all(isinstance(s, ast.Assign) and len(s.targets) == 1 for s in statements):
            return False
        collections = {_constant_index_root(statement.value) for statement in statements}
        if None in collections or len(collections) != 1:
            return False
        collection = collections.pop()
        scope = semantic.scopes.scope_for(source)
        return any(self._indexed_per_iteration(node, collection, scope) for node in self.ctx.index.of_type(ast.Subscript))

    def _indexed_per_iteration(self, node: ast.Subscript, collection: str, scope) -> bool:
        """``node`` is ``collection[v]`` (the same binding as in ``scope``), ``v`` the
        variable of a ``for`` loop around it."""
        if not isinstance(node.value, ast.Name) or node.value.id != collection or isinstance(node.slice, ast.Slice):
            return False
        semantic = self.ctx.semantic
        if semantic.scopes.bindings_of(collection, semantic.scopes.scope_for(node.value)) \
                != semantic.scopes.bindings_of(collection, scope):
            return False
        index = names_in(node.slice)
        return bool(index) and any(isinstance(loop, FOR_TYPES) and index <= set(targets_of(loop.target))
                                   for loop in semantic.enclosing_loops(node))

    def _whole_collection_kept(self, node: ast.Assign) -> bool:
        """``self.<attr> = ...`` keeps on the device, in any method, tensors that
        gather every item of a collection (``torch.stack([ds[i] for i in
        range(len(ds))])``), moved whole or entry by entry
        (``{k: v.to(d) for k, v in batch.items()}``): the whole dataset."""
        value = node.value
        moved = value.value if isinstance(value, ast.DictComp) else value.elt if isinstance(value, ast.ListComp) else value
        if self.ctx.semantic.enclosing_loops(node) or not self._every_item(moved, value, 0):
            return False
        return self.ctx.semantic.value(value).device is Tri.YES

    def _every_item(self, expr: ast.expr, scope: ast.AST, depth: int) -> bool:
        """``expr`` is a join of every item of a collection, through moves and
        casts, names assigned it, and the entries of a dict comprehension of
        such joins (an entry taken from ``joined.items()``/``.values()``)."""
        if depth > 4:
            return False
        expr = _before_conversions(expr)
        if isinstance(expr, ast.Name):
            source = _comprehension_source(scope, expr.id)
            if source is not None:
                return self._every_item(source, source, depth + 1)
            assigned = self.ctx.semantic.assignment_before(expr)
            return assigned is not None and self._every_item(assigned.value, assigned.value, depth + 1)
        if isinstance(expr, ast.DictComp):
            return self._every_item(expr.value, expr, depth + 1)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("items", "values") \
                and not expr.args:
            return self._every_item(expr.func.value, expr.func.value, depth + 1)
        if isinstance(expr, ast.Call) and self.ctx.qualified(expr.func) in JOINS and expr.args:
            return _gathers_all(expr.args[0], self.ctx)
        return False

    def _collected_from_files(self, node: ast.Assign, name: str) -> bool:
        """``node`` moves one piece per file or record inside a loop over what
        is on disk (``for e in os.scandir(d)``, the records of a JSON file),
        that does not train, and keeps it past the iteration (appended to a
        list made before the loop or to an attribute, also inside an object
        it builds): the loop assembles the whole dataset on the device."""
        semantic = self.ctx.semantic
        loops = semantic.enclosing_loops(node)
        if not loops or not semantic.walks_file_contents(loops[0]) or semantic.trains(loops[0].body):
            return False
        return self._is_data_on_device(node.value) and semantic.kept_past_iteration(loops[0], node.value, frozenset({name}))

    def visit_Call(self, node: ast.Call) -> None:
        if self.ctx.qualified(node.func) not in TENSOR_DATASETS:
            return
        if any(_moves_to_device(argument, self.ctx) and self._is_data_on_device(argument) for argument in call_arguments(node)):
            self.report(node)

    def _is_data_on_device(self, expr: ast.expr) -> bool:
        value = self.ctx.semantic.value(expr)
        if value.device is Tri.MAYBE and not value.is_module and self._each_piece_moved(expr):
            return True
        if value.device is not Tri.YES or value.is_module:
            return False
        if isinstance(expr, (ast.ListComp, ast.List, ast.Tuple)):
            return True
        return value.kind in (Kind.TENSOR, Kind.UNKNOWN) and not _from_literals(expr, self.ctx)

    def _each_piece_moved(self, expr: ast.expr) -> bool:
        """``expr`` is ``[x.to(d) for x in pieces]`` (or ``x.cuda()``), with no
        condition, ``d`` a device on the accelerator: every piece of the
        collection is moved, whatever its type (a graph library's ``Data``
        object, unknown to the model, moves with ``.to`` like a tensor), and
        the pieces are not modules."""
        if not isinstance(expr, ast.ListComp) or len(expr.generators) != 1 or expr.generators[0].ifs:
            return False
        generator, element = expr.generators[0], expr.elt
        if not (isinstance(generator.target, ast.Name) and isinstance(element, ast.Call)
                and isinstance(element.func, ast.Attribute) and isinstance(element.func.value, ast.Name)
                and element.func.value.id == generator.target.id):
            return False
        semantic = self.ctx.semantic
        pieces = semantic.value(generator.iter)
        if pieces.is_module or pieces.element is not None and pieces.element.is_module:
            return False
        if element.func.attr == "cuda":
            return not element.args and not element.keywords
        if element.func.attr != "to" or len(element.args) + len(element.keywords) != 1:
            return False
        target = element.args[0] if element.args else element.keywords[0].value
        if element.keywords and element.keywords[0].arg != "device":
            return False
        return device_of_value(target, semantic.value(target)) is Tri.YES

    def _used_as_module(self, attribute: str, init) -> bool:
        """The class calls ``self.<attribute>(...)`` or uses it as a module: a model it holds, not data."""
        semantic = self.ctx.semantic
        klass = semantic.class_of_method(init)
        if klass is None:
            return False
        if attribute in semantic.class_module_evidence(klass):
            return True
        wanted = attribute.split(".", 1)[1]
        return any(isinstance(call.func, ast.Attribute) and call.func.attr == wanted and isinstance(call.func.value, ast.Name)
                   and call.func.value.id == "self" for method in klass.methods.values() for call in semantic.own_nodes(method, (ast.Call,)))

    def _serves_data(self, init: ast.FunctionDef | ast.AsyncFunctionDef, attribute: str) -> bool:
        """The class hands out items or batches: a ``Dataset`` (by its bases),
        or a data-manager class with ``__getitem__``/``__iter__`` or a method
        that indexes ``self.<attribute>`` by an argument (``get_batch(i)``)."""
        semantic = self.ctx.semantic
        klass = semantic.class_of_method(init)
        if klass is None or klass.is_module:
            return False
        if "dataset" in klass.roles or klass.method("__getitem__") is not None or klass.method("__iter__") is not None:
            return True
        if any(_indexes_attribute_by_argument(method, attribute) for method in klass.methods.values() if method is not init):
            return True
        return self._batched_through_instances(klass, attribute)

    def _batched_through_instances(self, klass, attribute: str) -> bool:
        """Code of the file outside the class walks ``<obj>.<attribute>`` in
        batches in a run loop, where ``<obj>`` holds an instance of the class
        (``views.corr[view]`` with ``view = it % n`` in an optimisation loop,
        ``views: CapturedViews``): the object is the dataset, handed to the
        loop whole, and each iteration reads one batch of it."""
        semantic = self.ctx.semantic
        own = set(klass.methods.values())
        for unit in (semantic.module, *semantic.functions):
            if unit in own:
                continue
            holders = {node.value.id for node in semantic.own_nodes(unit, (ast.Attribute,))
                       if node.attr == attribute and isinstance(node.value, ast.Name)}
            for holder in sorted(holders):  # cheap, syntactic: the attribute read through a name
                finder = _BatchUse(f"{holder}.{attribute}", self.ctx)
                walk_visit(unit.body, finder)
                if any(self._in_run_loop(use) and _instance_read(semantic, use, holder, attribute, klass) for use in finder.uses):
                    return True
        return False

    def _handed_out_as_item(self, init: ast.FunctionDef | ast.AsyncFunctionDef, attribute: str) -> bool:
        """The class's ``__getitem__`` returns ``self.<attribute>`` whole, or an
        element of it as (an operand of) the item: a tensor made in
        ``__init__`` (a synthetic dataset's ``torch.randn(...)``) is the data."""
        klass = self.ctx.semantic.class_of_method(init)
        getitem = klass.method("__getitem__") if klass is not None else None
        if getitem is None:
            return False
        receiver = first_parameter(getitem)

        def is_attribute(node: ast.expr) -> bool:
            return isinstance(node, ast.Attribute) and node.attr == attribute and isinstance(node.value, ast.Name) \
                and node.value.id == receiver

        for ret in self.ctx.semantic.own_nodes(getitem, (ast.Return,)):
            for _, part in _returned_parts(ret.value) if ret.value is not None else ():
                # the whole tensor, or an element of it as the item or an operand of it (`self.x[i] * 2 - 1`)
                if is_attribute(part) or any(isinstance(n, ast.Subscript) and is_attribute(n.value) for n in ast.walk(part)):
                    return True
        return False

    def _iterated_in_batches(self, name: str, node: ast.Assign, function: ast.AST) -> bool:
        """A later training or evaluation loop slices ``name`` by the loop
        variable or iterates it, or it feeds a TensorDataset."""
        finder = _BatchUse(name, self.ctx)
        walk_visit(function, finder)
        if any(self.ctx.span(use)[0] > self.ctx.span(node)[1] and self._in_run_loop(use) for use in finder.uses):
            return True
        return self._batched_by_callees(name, node, function)

    def _batched_by_callees(self, name: str, node: ast.Assign, function: ast.AST) -> bool:
        """After ``node``, ``name`` is passed to a function of the file that
        walks that parameter in batches (``self.trainepoch(trainX, ...)`` whose
        loop reads ``X[idx]``, a sampler ``[x[s:s + w] for s in starts]``), in
        a run loop of the callee or from a run loop of ``function``."""
        semantic = self.ctx.semantic
        after = self.ctx.span(node)[1]
        for call in semantic.own_nodes(function, (ast.Call,)):
            if self.ctx.span(call)[0] <= after or not semantic.may_call_local(call):
                continue
            callee = semantic.callee(call)
            if not isinstance(callee, FUNCTION_TYPES) or callee is function:
                continue
            for parameter in _parameters_given(semantic, call, callee, name):
                finder = _BatchUse(parameter, self.ctx)
                walk_visit(callee.body, finder)
                if not finder.uses:
                    continue
                if any(semantic.is_run_loop(loop) for loop in semantic.enclosing_loops(call)) \
                        or any(self._in_run_loop(use) for use in finder.uses):
                    return True
        return False

    def _batched_by_callers(self, name: str, node: ast.Assign) -> bool:
        """``name`` is returned (alone or in a tuple) and a caller of the file,
        outside any loop, walks what it receives in batches
        (``train_x, train_y = prepare_data(p, d)``); a call made in a loop
        returns that iteration's tensors (an embedding of one batch's prompts)."""
        semantic = self.ctx.semantic
        function = semantic.function_of(node)
        if function is None:
            return False
        positions = {index for ret in semantic.own_nodes(function, (ast.Return,)) if ret.value is not None
                     for index, part in _returned_parts(ret.value) if dotted_name(part) == name}
        if not positions:
            return False
        for call in semantic.call_sites_of(function):
            statement = semantic.parents.get(call)
            if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
                continue
            if semantic.enclosing_loops(statement):
                continue  # called once per iteration: it returns one batch's tensors, not a dataset moved up front
            target = statement.targets[0]
            for index in positions:
                received = target if index is None else (
                    target.elts[index] if isinstance(target, ast.Tuple) and index < len(target.elts) else None)
                received_name = dotted_name(received) if received is not None else None
                if received_name and self._iterated_in_batches(received_name, statement, semantic.unit_of(statement)):
                    return True
        return False

    def _in_run_loop(self, use: ast.AST) -> bool:
        """The batches feed a model: the loop trains or evaluates, or passes
        them to a callable that is no torch function (``model(x[i:j])``)."""
        if isinstance(use, ast.Call):
            if self.ctx.qualified(use.func) in BATCH_LOADERS:
                return self._loader_drawn_in_run_loop(use)
            return True  # TensorDataset(x): a loader's batches
        semantic = self.ctx.semantic
        loops = ([use] if isinstance(use, FOR_TYPES) else []) + semantic.enclosing_loops(use)
        if any(semantic.is_run_loop(loop) for loop in loops):
            return True
        if isinstance(use, FOR_TYPES):
            batch = set(targets_of(use.target))
            return any(self._model_call(call) and names_in(call) & batch
                       for call in ast.walk(use) if isinstance(call, ast.Call))
        parent = semantic.parents.get(use)
        return isinstance(parent, ast.Call) and use in parent.args and self._model_call(parent)

    def _loader_drawn_in_run_loop(self, loader: ast.Call) -> bool:
        """The loader ``loader`` builds over the data is bound to a name that a
        run loop of the same function iterates (``for batch in loader:``,
        ``enumerate(loader)``): its batches are drawn from that data every step."""
        semantic = self.ctx.semantic
        statement = semantic.parents.get(loader)
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
            return False
        name = statement.targets[0].id
        for loop in semantic.own_nodes(semantic.unit_of(statement), FOR_TYPES):
            iterable = loop.iter
            if isinstance(iterable, ast.Call) and self.ctx.qualified(iterable.func) == "enumerate" and iterable.args:
                iterable = iterable.args[0]
            if isinstance(iterable, ast.Name) and iterable.id == name and semantic.is_run_loop(loop):
                return True
        return False

    def _model_call(self, call: ast.Call) -> bool:
        """A call of something not in a library: a model, a step function."""
        if not isinstance(call.func, (ast.Name, ast.Attribute)):
            return False
        qualified = self.ctx.qualified(call.func)
        # None: a local or parameter; an undotted name that is no builtin: a global the file never binds
        return qualified is None or "." not in qualified and not hasattr(builtins, qualified)


def _loader_dataset(loader: ast.Call) -> ast.expr | None:
    """The dataset a :data:`BATCH_LOADERS` call draws from: its first argument or ``dataset=``."""
    if loader.args and not isinstance(loader.args[0], ast.Starred):
        return loader.args[0]
    keyword = keyword_arg(loader, "dataset")
    return None if keyword is None else keyword.value


def _instance_read(semantic, use: ast.AST, holder: str, attribute: str, klass) -> bool:
    """In ``use`` (a batch read found by :class:`_BatchUse`), ``holder`` holds
    an instance of the file's class ``klass`` where it reads ``attribute``."""
    return any(isinstance(node, ast.Attribute) and node.attr == attribute and isinstance(node.value, ast.Name)
               and node.value.id == holder and semantic.value(node.value).klass == klass.qualname
               for node in ast.walk(use))


def _parameters_given(semantic, call: ast.Call, callee: ast.AST, name: str) -> list[str]:
    """The parameters of ``callee`` that ``call`` fills with ``name`` itself
    (by position, after the receiver of a method called on an object, or by keyword)."""
    on_object = isinstance(call.func, ast.Attribute) and semantic.class_of_method(callee) is not None and not is_static_method(callee)
    bound = arguments_bound(call, callee, skip_receiver=on_object)  # `obj.method(x)`: the receiver fills the first one
    return [parameter for parameter, argument in bound.items() if dotted_name(argument) == name]



#: The builtins ``range`` and ``len`` as the file's names resolve them.
_RANGE = frozenset({"range", "builtins.range"})
_LEN = frozenset({"len", "builtins.len"})


def _comprehension_source(comprehension: ast.AST, name: str) -> ast.expr | None:
    """What the comprehension ``comprehension`` iterates to bind ``name`` (``batch.items()``
    for ``v`` in ``{k: f(v) for k, v in batch.items()}``), or None."""
    if not isinstance(comprehension, (ast.DictComp, ast.ListComp, ast.GeneratorExp, ast.SetComp)):
        return None
    for generator in comprehension.generators:
        if name in targets_of(generator.target):
            return generator.iter
    return None


def _gathers_all(parts: ast.expr, ctx) -> bool:
    """``parts`` takes every item of a collection: ``[c[i] for i in range(len(c))]``
    (the item may be indexed further, ``c[i][key]``), with no condition."""
    if not isinstance(parts, (ast.ListComp, ast.GeneratorExp)) or len(parts.generators) != 1 or parts.generators[0].ifs:
        return False
    generator = parts.generators[0]
    iterable = generator.iter
    if not (isinstance(generator.target, ast.Name) and isinstance(iterable, ast.Call)
            and ctx.qualified(iterable.func) in _RANGE and len(iterable.args) == 1 and isinstance(iterable.args[0], ast.Call)
            and ctx.qualified(iterable.args[0].func) in _LEN and len(iterable.args[0].args) == 1):
        return False
    collection = dotted_name(iterable.args[0].args[0])
    index = generator.target.id
    return collection is not None and any(
        isinstance(node, ast.Subscript) and dotted_name(node.value) == collection and isinstance(node.slice, ast.Name)
        and node.slice.id == index for node in ast.walk(parts.elt))


def _returned_parts(value: ast.expr) -> list[tuple[int | None, ast.expr]]:
    """``(index, expression)`` of what a ``return`` gives: the elements of a tuple, or the whole value (index None)."""
    if isinstance(value, ast.Tuple):
        return list(enumerate(value.elts))
    return [(None, value)]


def _indexes_attribute_by_argument(method: ast.FunctionDef | ast.AsyncFunctionDef, attribute: str) -> bool:
    """``method`` reads ``self.<attribute>[...]`` with an index that uses one of its parameters."""
    receiver = first_parameter(method)
    parameters = parameter_names(method) - {receiver}
    if receiver is None or not parameters:
        return False
    for node in ast.walk(method):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and isinstance(node.value.value, ast.Name) and node.value.attr == attribute:
            if node.value.value.id == receiver and names_in(node.slice) & parameters:
                return True
    return False


def _constant_index_root(expr: ast.expr) -> str | None:
    """``c`` for ``c[0]``, ``c[0][1]`` (constant indices only); None otherwise."""
    if not isinstance(expr, ast.Subscript):
        return None
    while isinstance(expr, ast.Subscript):
        if not (isinstance(expr.slice, ast.Constant) and type(expr.slice.value) is int):
            return None
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _anchor(assignment: ast.Assign) -> ast.AST:
    """Where a finding on ``assignment`` is reported: the element of a list
    comprehension (``[t.to(device) for t in parts]``, the expression that
    moves each piece, on its own line when the comprehension spans several),
    otherwise the statement."""
    if isinstance(assignment.value, ast.ListComp):
        return assignment.value.elt
    return assignment


def _moves_to_device(expr: ast.expr, ctx) -> bool:
    """``expr`` contains ``.cuda()``, ``.to(...)``, a ``device=`` argument or a
    legacy CUDA tensor type's constructor (``torch.cuda.LongTensor(ids)``; its
    calls read from the node index)."""
    index = ctx.index
    position = index.position_of(expr)
    calls = index.subtree_of_type(position, (ast.Call,)) if position is not None else [n for n in ast.walk(expr) if isinstance(n, ast.Call)]
    for node in calls:
        func = node.func
        if func.__class__ is ast.Attribute and func.attr in ("cuda", "to"):
            return True
        if any(keyword.arg == "device" for keyword in node.keywords):
            return True
        if func.__class__ is ast.Attribute and func.attr.endswith("Tensor") and ctx.qualified(func) in LEGACY_CUDA_TENSOR_TYPES:
            return True
    return False


#: torch functions that join tensors: data when what they join is.
JOINS = frozenset({"torch.stack", "torch.cat"})
#: torch functions that turn existing data into a tensor.
DATA_CONVERSIONS = frozenset({"torch.tensor", "torch.as_tensor", "torch.from_numpy", "torch.load", "torch.stack", "torch.cat", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor"})


def _converted_from_data(expr: ast.expr, ctx) -> bool:
    """``expr`` is a variable, or a data-conversion call, moved/cast with ``.to``/``.cuda``/..."""
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)):
        return _converted_from_data(expr.elt, ctx)  # shards loaded one by one
    expr = _before_conversions(expr)
    if isinstance(expr, (ast.Name, ast.Attribute, ast.Subscript)):
        return True
    if not isinstance(expr, ast.Call):
        return False
    qualified = ctx.qualified(expr.func)
    if qualified in JOINS:
        parts = expr.args[0] if expr.args else None
        if isinstance(parts, (ast.List, ast.Tuple)):
            return all(_converted_from_data(part, ctx) for part in parts.elts)
        return parts is not None and _converted_from_data(parts, ctx)  # `torch.cat([randperm(...) ...])`: indices, not data
    if qualified not in DATA_CONVERSIONS and qualified not in LEGACY_CUDA_TENSOR_TYPES:
        return False
    source = expr.args[0] if expr.args else None
    # `torch.tensor([x * 255 for x in mean])`: a constant built here from settings, not data
    return not isinstance(source, (ast.ListComp, ast.List, ast.Tuple, ast.GeneratorExp, ast.Constant))


def _from_literals(expr: ast.expr, ctx) -> bool:
    """The tensor is built by a torch factory from literal numbers/lists only (a constant, not data)."""
    expr = _before_conversions(expr)
    if not isinstance(expr, ast.Call):
        return False
    qualified = ctx.qualified(expr.func) or ""
    if not qualified.startswith("torch."):
        return False
    unnamed = [*expr.args, *(keyword.value for keyword in expr.keywords if keyword.arg is None)]  # `*a` and `**kw` too
    return all(_literal(argument) for argument in unnamed)


def _before_conversions(expr: ast.expr) -> ast.expr:
    """``expr`` without the conversion calls around it: ``torch.tensor(x)`` for ``torch.tensor(x).float().cuda()``."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in CONVERSIONS:
        expr = expr.func.value
    return expr


def _literal(node: ast.expr) -> bool:
    """A number, or a list/tuple of them (signs and nested starred lists included)."""
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float)  # not bool, complex or str
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    if isinstance(node, ast.Starred):
        return _literal(node.value)
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(_literal(element) for element in node.elts)
    return False


class _BatchUse(Visitor):
    """Loops that walk a tensor in batches (slices by a loop variable, ``for b in X.split(n)``), and TensorDataset(X)."""

    def __init__(self, name: str, ctx) -> None:
        self.name = name
        self.ctx = ctx
        self.uses: list[ast.AST] = []
        self._loop_names: list[set[str]] = []

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        if _iterates_tensor(node.iter, self.name):
            self.uses.append(node)
        assigned = _AssignedNames()
        walk_visit(node.body, assigned)
        self._loop_names.append(set(targets_of(node.target)) | assigned.names)

    def leave_For(self, node: ast.For | ast.AsyncFor) -> None:
        self._loop_names.pop()

    def visit_ListComp(self, node: ast.AST) -> None:
        """A comprehension's variables index like a loop's (``[x[s:s + w] for s in starts]``)."""
        self._loop_names.append({name for generator in node.generators for name in targets_of(generator.target)})

    def leave_ListComp(self, node: ast.AST) -> None:
        self._loop_names.pop()

    visit_SetComp = visit_GeneratorExp = visit_DictComp = visit_ListComp
    leave_SetComp = leave_GeneratorExp = leave_DictComp = leave_ListComp

    def visit_Assign(self, node: ast.Assign) -> bool:
        walk_visit(node.value, self)
        return False  # `out[i:j] = ...` fills a buffer: the targets are not reads of batches

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if not self._loop_names or dotted_name(node.value) != self.name:
            return
        loop_names = set().union(*self._loop_names)
        if names_in(node.slice) & loop_names:
            self.uses.append(node)

    def visit_Call(self, node: ast.Call) -> None:
        qualified = self.ctx.qualified(node.func)
        if qualified in TENSOR_DATASETS and any(dotted_name(argument) == self.name for argument in call_arguments(node)):
            self.uses.append(node)
        elif qualified in BATCH_LOADERS and dotted_name(_loader_dataset(node)) == self.name:
            self.uses.append(node)  # a loader's batches, when a run loop draws them (`_in_run_loop`)


class _AssignedNames(Visitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.names.update(targets_of(target))


def _iterates_tensor(iterable: ast.expr, name: str) -> bool:
    if dotted_name(iterable) == name:
        return True
    return (
        isinstance(iterable, ast.Call)
        and isinstance(iterable.func, ast.Attribute)
        and iterable.func.attr in ("split", "chunk", "tensor_split", "unbind")
        and dotted_name(iterable.func.value) == name
    )
