"""MEM308 dataloader-worker-copy-on-read."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.semantic import frameworks as fw
from memlint.lint.syntax import COMPREHENSION_TYPES, FUNCTION_TYPES
from memlint.lint.signatures import first_parameter

#: Builtins that keep a Python collection of what they are given (``list(f)``).
_LIST_BUILTINS = frozenset({"sorted", "list", "tuple", "set", "dict"})


class DataloaderWorkerCopyOnRead(Rule):
    """## What it does
    Reports a `Dataset` (a class deriving from `torch.utils.data.Dataset`)
    that keeps a collection of Python objects as an attribute — what
    `json.load`, `pickle.load` or `yaml.safe_load` return, the lines of a
    file (`f.readlines()`, `[json.loads(l) for l in f]`), a comprehension
    over them — and whose `__getitem__` indexes that attribute with the
    sample index (`self.items[index]`), in a file that creates a
    `DataLoader` with `num_workers` other than 0.

    ## Why is this bad?
    DataLoader workers are forked: they share the parent's memory pages
    copy-on-write. Every Python object has a reference count in its header,
    and reading an element (`self.samples[i]`) writes that count, so the
    page holding it is copied into the worker. Over an epoch each worker
    touches every element and ends up with its own copy of the whole
    collection: host memory grows by the collection's size times the number
    of workers, which looks like a leak ("memory grows every epoch until the
    OOM killer stops the run").

    ## Example
    ```python
    class Captions(Dataset):
        def __init__(self, path):
            with open(path) as f:
                self.items = json.load(f)  # a list of dicts

    loader = DataLoader(Captions("train.json"), batch_size=64, num_workers=8)
    ```

    ## Use instead
    ```python
    class Captions(Dataset):
        def __init__(self, path):
            with open(path) as f:
                items = json.load(f)
            # one numpy array (no per-element refcounts), or a memory-mapped file
            self.captions = np.array([item["caption"] for item in items], dtype=np.bytes_)
            self.ids = np.array([item["id"] for item in items])
    ```

    ## Known problems
    The size of the collection is not known: a short list of a few hundred
    entries costs nothing. Lists of paths from a directory listing
    (`glob.glob`, `os.listdir`, `Path.iterdir`) are not reported: their
    size is the number of files, often a handful; an attribute that
    `__getitem__` reads without the sample index (a configuration dict) is
    touched once per worker, not copied element by element. numpy arrays, tensors, pandas frames,
    memory-mapped files and Arrow tables are exempt, as is an attribute
    converted to one of those in the same method. A DataLoader created in
    another file is not seen (the rule then stays silent), nor is a
    collection built by a helper of another file.

    ## References
    - [PyTorch issue #13246: DataLoader workers' memory grows with Python lists](https://github.com/pytorch/pytorch/issues/13246)
    - [torch.utils.data: multi-process data loading](https://pytorch.org/docs/stable/data.html#multi-process-data-loading)
    """

    CODE = "MEM308"
    NAME = "dataloader-worker-copy-on-read"
    MESSAGE = "a Dataset keeps a collection of Python objects and the file's DataLoader forks workers: each worker ends up with its own copy (copy-on-read)"
    SEVERITY = Severity.INFO
    TRIGGERS = ("num_workers",)
    NEEDS_NAMES = ("num_workers",)
    FRAMEWORK = "torch"
    VALID = (
        "import json\nimport numpy as np\nfrom torch.utils.data import Dataset, DataLoader\nclass D(Dataset):\n    def __init__(self, p):\n        self.ids = np.array([r['id'] for r in json.load(open(p))])\n    def __getitem__(self, i):\n        return self.ids[i]\nloader = DataLoader(D('x.json'), num_workers=4)\n",
        "import json\nfrom torch.utils.data import Dataset, DataLoader\nclass D(Dataset):\n    def __init__(self, p):\n        self.items = json.load(open(p))\n    def __getitem__(self, i):\n        return self.items[i]\nloader = DataLoader(D('x.json'), num_workers=0)\n",
        "import json\nfrom torch.utils.data import DataLoader\nclass Config:\n    def __init__(self, p):\n        self.items = json.load(open(p))\nloader = DataLoader(range(10), num_workers=4)\n",
        "import json\nfrom torch.utils.data import Dataset, DataLoader\nclass D(Dataset):\n    def __init__(self, p):\n        self.cfg = json.load(open(p))\n    def __getitem__(self, i):\n        return self.cfg['root'] + str(i)\nloader = DataLoader(D('x.json'), num_workers=2)\n",
    )
    INVALID = (
        "import json\nfrom torch.utils.data import Dataset, DataLoader\nclass D(Dataset):\n    def __init__(self, p):\n        with open(p) as f:\n            self.items = json.load(f)  # expect: MEM308\n    def __getitem__(self, index):\n        return self.items[index]['text']\nloader = DataLoader(D('x.json'), batch_size=8, num_workers=4)\n",
        "from torch.utils.data import Dataset, DataLoader\nclass Lines(Dataset):\n    def __init__(self, p):\n        with open(p) as f:\n            self.lines = [l.strip() for l in f.readlines()]  # expect: MEM308\n    def __getitem__(self, i):\n        return self.lines[i % len(self.lines)]\ndef make(p, workers):\n    return DataLoader(Lines(p), num_workers=workers)\n",
        "import pickle\nfrom torch.utils import data\nclass Frames(data.Dataset):\n    def __init__(self, root):\n        meta = pickle.load(open(root + '/meta.pkl', 'rb'))\n        self.meta = meta  # expect: MEM308\n    def __getitem__(self, idx):\n        key = idx\n        return self.meta[key]\nloader = data.DataLoader(Frames('r'), num_workers=8)\n",
    )

    def visit_Module(self, node: ast.Module) -> None:
        semantic = self.ctx.semantic
        if not self._forks_workers():
            return
        for klass in semantic.classes.by_node.values():
            if "dataset" not in klass.roles:
                continue
            indexed = self._indexed_per_sample(klass)
            if not indexed:
                continue
            for method in klass.methods.values():
                self._check_method(method, indexed)

    def _indexed_per_sample(self, klass) -> frozenset[str]:
        """The attributes that ``__getitem__`` indexes with the sample index
        (``self.items[index]``, ``self.lines[i % n]``): over an epoch every
        element is read, and so copied, in every worker."""
        getitem = klass.method("__getitem__")
        if getitem is None:
            return frozenset()
        semantic = self.ctx.semantic
        derived = semantic.input_derived(getitem)
        receiver = first_parameter(getitem)
        if receiver is None:
            return frozenset()
        found = set()
        for node in semantic.own_nodes(getitem, (ast.Subscript,)):
            base = node.value
            if (isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == receiver
                    and {n.id for n in ast.walk(node.slice) if isinstance(n, ast.Name)} & derived):
                found.add(base.attr)
        return frozenset(found)

    def _forks_workers(self) -> bool:
        """The file creates a DataLoader whose ``num_workers`` is not 0."""
        for call in self.ctx.semantic.index.of_type(ast.Call):
            keyword = fw.DATALOADER_WORKERS.get(self.ctx.qualified(call.func) or "")
            if keyword is None:
                continue
            for k in call.keywords:
                if k.arg == keyword and not (isinstance(k.value, ast.Constant) and k.value.value in (0, None, False)):
                    return True
        return False

    def _check_method(self, method: ast.AST, indexed: frozenset[str]) -> None:
        semantic = self.ctx.semantic
        receiver = first_parameter(method)
        if receiver is None:
            return
        locals_once = _single_assignments(semantic, method)
        for statement in semantic.own_nodes(method, (ast.Assign, ast.AnnAssign)):
            target, value = _target_and_value(statement)
            if target is None:
                continue
            if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == receiver):
                continue
            if target.attr not in indexed:
                continue
            value = _through_local(value, locals_once)
            if self._object_collection(value, 0) and not self._converted_later(method, target.attr, receiver, statement):
                self.report(statement)

    def _object_collection(self, value: ast.expr, depth: int) -> bool:
        """``value`` builds a collection of Python objects from data."""
        if depth > 2:
            return False
        if isinstance(value, ast.Subscript) and not isinstance(value.slice, ast.Slice):
            return self._object_collection(value.value, depth + 1)  # `json.load(f)["annotations"]`
        if isinstance(value, COMPREHENSION_TYPES) and not isinstance(value, ast.GeneratorExp):
            return any(self._listing(g.iter) for g in value.generators) or self._reads_objects(
                value.value if isinstance(value, ast.DictComp) else value.elt)
        if isinstance(value, ast.Call):
            qualified = self.ctx.qualified(value.func)
            if qualified in fw.PYTHON_OBJECT_READERS:
                return True
            if qualified in _LIST_BUILTINS and value.args:
                return self._listing(value.args[0]) or self._object_collection(value.args[0], depth + 1)
            return isinstance(value.func, ast.Attribute) and value.func.attr in fw.LINE_READING_METHODS
        return False

    def _listing(self, iterable: ast.expr) -> bool:
        """The lines of a file: ``f.readlines()``, ``open(p)``, a ``with
        open(...) as f`` target, ``text.splitlines()``."""
        if isinstance(iterable, ast.Call):
            if isinstance(iterable.func, ast.Attribute) and iterable.func.attr in fw.LINE_READING_METHODS:
                return True
            if self.ctx.qualified(iterable.func) in _LIST_BUILTINS and iterable.args:
                return self._listing(iterable.args[0])
            return isinstance(iterable.func, ast.Name) and iterable.func.id == "open"
        if isinstance(iterable, ast.Name):
            return self._bound_to_open_file(iterable)
        return False

    def _bound_to_open_file(self, name: ast.Name) -> bool:
        """``name`` is the target of ``with open(...) as name``."""
        for ancestor in self.ctx.semantic.ancestors(name):
            if isinstance(ancestor, (ast.With, ast.AsyncWith)):
                for item in ancestor.items:
                    target = item.optional_vars
                    call = item.context_expr
                    if isinstance(target, ast.Name) and target.id == name.id and isinstance(call, ast.Call) and (
                            isinstance(call.func, ast.Name) and call.func.id == "open"):
                        return True
            if isinstance(ancestor, FUNCTION_TYPES):
                return False
        return False

    def _reads_objects(self, element: ast.expr) -> bool:
        return any(isinstance(n, ast.Call) and self.ctx.qualified(n.func) in fw.PYTHON_OBJECT_READERS for n in ast.walk(element))

    def _converted_later(self, method: ast.AST, attr: str, receiver: str, assignment: ast.Assign) -> bool:
        """``self.x`` is bound again later in the method (``self.x = np.array(self.x)``)."""
        for statement in self.ctx.semantic.own_nodes(method, (ast.Assign, ast.AnnAssign)):
            if statement is assignment or statement.lineno <= assignment.lineno:
                continue
            for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target]):
                if isinstance(target, ast.Attribute) and target.attr == attr and isinstance(target.value, ast.Name) and target.value.id == receiver:
                    return True
        return False


def _through_local(value: ast.expr, locals_once: dict[str, ast.expr]) -> ast.expr:
    """``value`` with a local bound once in the method replaced by what it was
    bound to, also at the root of an item chain: ``blob["annotations"]`` after
    ``blob = json.load(f)`` is ``json.load(f)["annotations"]``."""
    keys = []
    root = value
    while isinstance(root, ast.Subscript) and not isinstance(root.slice, ast.Slice) and len(keys) < 2:
        keys.append(root.slice)
        root = root.value
    if not (isinstance(root, ast.Name) and root.id in locals_once):
        return value
    rebuilt = locals_once[root.id]
    for key in reversed(keys):
        rebuilt = ast.Subscript(value=rebuilt, slice=key, ctx=ast.Load())
    return rebuilt


def _target_and_value(statement: ast.stmt) -> tuple[ast.expr | None, ast.expr | None]:
    """The one target and the value of ``x = v`` or of an annotated
    ``x: T = v`` (the annotation changes nothing at run time); (None, None)
    for several targets or an annotation without a value."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        return statement.targets[0], statement.value
    if isinstance(statement, ast.AnnAssign) and statement.value is not None:
        return statement.target, statement.value
    return None, None


def _single_assignments(semantic, method: ast.AST) -> dict[str, ast.expr]:
    found: dict[str, list[ast.expr]] = {}
    for statement in semantic.own_nodes(method, (ast.Assign, ast.AnnAssign)):
        target, value = _target_and_value(statement)
        if isinstance(target, ast.Name):
            found.setdefault(target.id, []).append(value)
    return {name: values[0] for name, values in found.items() if len(values) == 1}
