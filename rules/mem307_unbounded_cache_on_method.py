"""MEM307 unbounded-cache-on-method."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.syntax import FUNCTION_TYPES
from memlint.lint.signatures import positional_parameters

UNBOUNDED = frozenset({"functools.cache"})
LRU = frozenset({"functools.lru_cache"})
#: Decorators that make a def no instance method.
_NOT_INSTANCE = frozenset({"staticmethod", "classmethod", "builtins.staticmethod", "builtins.classmethod"})
#: Methods that Python calls on the class, not on an instance.
_CLASS_LEVEL = frozenset({"__init_subclass__", "__class_getitem__", "__new__"})
#: Enum bases (enum.py): their members are singletons, caching on them holds nothing new.
_ENUMS = frozenset({"enum.Enum", "enum.IntEnum", "enum.Flag", "enum.IntFlag", "enum.StrEnum", "enum.ReprEnum"})


class UnboundedCacheOnMethod(Rule):
    """## What it does
    Reports `functools.cache`, `functools.lru_cache(maxsize=None)` or
    `functools.lru_cache(None)` (any import spelling, above or below other
    decorators) on an instance method — above all `Dataset.__getitem__`
    or a method of a model.

    ## Why is this bad?
    The cache is stored on the function, which lives as long as the class:
    it keeps a reference to every `self` it was called with (the dataset or
    model is never freed), to every argument, and to every result — for
    `__getitem__`, every decoded sample or tensor of the dataset, so host
    memory grows to the whole dataset. With `DataLoader(num_workers>0)`
    each worker fills its own copy, and tensors returned by a model method
    stay on the GPU.

    ## Example
    ```python
    class Images(Dataset):
        @functools.lru_cache(maxsize=None)
        def __getitem__(self, i):
            return load_image(self.paths[i])
    ```

    ## Use instead
    ```python
    class Images(Dataset):
        def __init__(self, paths):
            self.paths = paths
            self._load = functools.lru_cache(maxsize=1024)(load_image)  # bounded, per instance

        def __getitem__(self, i):
            return self._load(self.paths[i])
    ```

    ## Known problems
    Bounded caches (`lru_cache()`, `lru_cache(maxsize=256)`) are not
    reported. Exempt: `staticmethod` and `classmethod` (in either decorator
    order), methods of `Enum`/`Flag` classes, `__init_subclass__`,
    `__class_getitem__`, `functools.cached_property` (one value per
    instance, freed with it), and functions nested inside a method (they
    are created per call). A `maxsize` given by a variable is not known and
    is not reported.

    ## References
    - [functools.lru_cache](https://docs.python.org/3/library/functools.html#functools.lru_cache)
    - [Python FAQ: how do I cache method calls?](https://docs.python.org/3/faq/programming.html#how-do-i-cache-method-calls)
    """

    CODE = "MEM307"
    NAME = "unbounded-cache-on-method"
    MESSAGE = "an unbounded cache on an instance method keeps every `self`, argument and result alive for the life of the process"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("cache",)
    NEEDS_NAMES = ("cache", "lru_cache")
    VALID = (
        "import functools\nclass Data:\n    @functools.lru_cache(maxsize=256)\n    def __getitem__(self, i):\n        return i\n",
        "import functools\nclass Data:\n    @staticmethod\n    @functools.cache\n    def parse(line):\n        return line.split()\n",
        "import functools\nclass Data:\n    @functools.cached_property\n    def index(self):\n        return {}\n",
        "import enum\nimport functools\nclass Color(enum.Enum):\n    RED = 1\n    @functools.cache\n    def label(self):\n        return self.name.lower()\n",
        "import functools\nclass Data:\n    def __getitem__(self, i):\n        @functools.cache\n        def load(j):\n            return j\n        return load(i)\n",
        "import functools\n@functools.cache\ndef vocab(path):\n    return open(path).read().split()\n",
    )
    INVALID = (
        "import functools\nfrom torch.utils.data import Dataset\nclass Images(Dataset):\n    @functools.lru_cache(maxsize=None)  # expect: MEM307\n    def __getitem__(self, i):\n        return self.load(i)\n",
        "from functools import cache\nimport torch.nn as nn\nclass Net(nn.Module):\n    @cache  # expect: MEM307\n    def positional(self, n):\n        return self.table[:n]\n",
        "from functools import lru_cache as memo\nclass Tokenizer:\n    @property\n    @memo(None)  # expect: MEM307\n    def vocab(self):\n        return {}\n",
    )

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if not node.decorator_list:
            return
        cache = next((d for d in node.decorator_list if self._unbounded(d)), None)
        if cache is None:
            return
        semantic = self.ctx.semantic
        klass = semantic.class_of_method(node)
        if klass is None or node.name in _CLASS_LEVEL:
            return  # a function, or one nested in a method (made per call)
        if any(self.ctx.qualified(d) in _NOT_INSTANCE or isinstance(d, ast.Name) and d.id in _NOT_INSTANCE
               for d in node.decorator_list):
            return
        if any(base in _ENUMS for info in klass.mro() for base in info.library_bases):
            return
        if not positional_parameters(node):
            return
        if node.name == "__getitem__" and "dataset" in klass.roles:
            message = "an unbounded cache on `Dataset.__getitem__` keeps every sample (and the dataset) alive, once per DataLoader worker"
        elif klass.is_module:
            message = "an unbounded cache on a module's method keeps the module, every argument and every result (tensors included) alive"
        else:
            message = None
        self.report(cache, message=message)

    def _unbounded(self, decorator: ast.expr) -> bool:
        """``@cache``, ``@lru_cache(maxsize=None)``, ``@lru_cache(None)``."""
        if isinstance(decorator, ast.Call):
            if self.ctx.qualified(decorator.func) not in LRU:
                return False
            size = decorator.args[0] if decorator.args else next(
                (k.value for k in decorator.keywords if k.arg == "maxsize"), None)
            return isinstance(size, ast.Constant) and size.value is None
        return self.ctx.qualified(decorator) in UNBOUNDED
