"""MEM502 keras-model-in-loop-without-clear-session."""

import ast
import re

from memlint.lint.names import dotted_name
from memlint.lint.rule import Rule
from memlint.lint.diagnostic import Applicability, Fix, Severity
from memlint.lint.semantic.operations import SMALL_RANGE, literal_iterable
from memlint.lint.semantic.scopes import BindingKind
from memlint.lint.syntax import FUNCTION_TYPES
from memlint.lint.walk import Visitor, visit as walk_visit

#: Calls that create a new Keras model (and new graph/layer state in the global session).
KERAS_MODEL = re.compile(
    r"^(?:tensorflow\.(?:compat\.v[12]\.)?)?keras\.(?:models\.)?(?:Sequential|Model|clone_model|load_model|model_from_json|model_from_config)$|"
    r"^(?:tensorflow\.(?:compat\.v[12]\.)?)?keras\.applications\.(?:\w+\.)?[A-Z]\w*$"
)
CLEAR_SESSION = re.compile(r"^(?:tensorflow\.(?:compat\.v[12]\.)?)?keras\.(?:backend|utils)\.clear_session$")
MAX_DEPTH = 3
#: Methods that use a built model as a whole model (keras 3.15.1 ``keras/src/trainers/trainer.py``).
MODEL_USE_METHODS = frozenset({"compile", "fit", "evaluate", "predict", "train_on_batch", "test_on_batch", "fit_generator"})
#: Methods that keep what they are given in a container.
STORING_METHODS = frozenset({"append", "extend", "insert", "add"})


class KerasModelInLoopWithoutClearSession(Rule):
    """## What it does
    Reports a Keras model built inside a loop — `keras.Sequential(...)`,
    `tf.keras.Model(inputs, outputs)`, `keras.applications.*(...)`,
    `clone_model`/`load_model`, an instance of a local `keras.Model`
    subclass, or a call to a local function that builds one — when the loop
    never calls `tf.keras.backend.clear_session()` (or Keras 3's
    `keras.utils.clear_session()`). Typical loops: hyper-parameter search,
    k-fold cross-validation, ensembles.

    ## Why is this bad?
    Keras keeps global state for every model it builds (layer-name
    counters, the graph and its variables in TF1-style and functional
    code); old models are not released when the Python name is rebound.
    Memory — host and device — grows with each iteration until the search
    dies part-way through.

    ## Example
    ```python
    for units in (64, 128, 256):
        model = keras.Sequential([keras.layers.Dense(units), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        model.fit(x, y)
    ```

    ## Use instead
    ```python
    for units in (64, 128, 256):
        keras.backend.clear_session()
        model = keras.Sequential([keras.layers.Dense(units), keras.layers.Dense(1)])
        model.compile(optimizer="adam", loss="mse")
        model.fit(x, y)
    ```

    ## Fix safety
    The fix calls `tf.keras.backend.clear_session()` (or
    `keras.backend.clear_session()`) as the first statement of the
    innermost loop that builds the model, spelled through an import of
    TensorFlow or Keras that is bound where the loop runs (a module-level
    import, or one made earlier in the loop's own function). It is unsafe:
    each iteration still builds and trains its own model, but
    `clear_session()` resets Keras's global state, so the names Keras gives
    layers and models automatically restart from the first (`dense`, not
    `dense_7`). Those names are part of the program's visible results:
    they key the weights in saved HDF5 files and checkpoints and appear in
    `model.summary()`, TensorBoard logs and any lookup by an automatic name.
    There is no fix for a function that a driver calls repeatedly (no loop
    in the file to put it in), nor when no `tensorflow` or `keras` import
    is visible in the loop's scope (TensorFlow imported only inside other
    functions: the call would raise `NameError`).

    ## Known problems
    `clear_session()` anywhere in the loop, or in the function the loop
    calls to build the model, counts (even when conditional). A loop that
    builds models in a function defined in another module is not seen. A
    search driven by a framework callback is seen when the file hands the
    objective to the driver (`study.optimize(objective)`) or when the
    objective takes an Optuna trial by annotation (`def objective(trial:
    optuna.Trial)`: only a study makes trials, once per trial), wherever it
    is handed over (a closure a factory returns, a wrapper); an
    unannotated objective that the file never passes to a study is not. Comprehensions that build an ensemble are not loops here. A loop
    that assembles one model is not reported: in a Keras layer's or model's
    own method (sub-layers made in `__init__`/`build`), or keeping what it
    builds in a list or attribute without compiling, fitting, evaluating or
    predicting with it. A loop that keeps every model it trains in a
    container made before the loop and read after it (a deep ensemble, the
    best model of each fold) is not reported: the models are the program's
    own state, and `clear_session()` would free none of them. Models that a
    helper of the file builds, trains and returns inside a record
    (`{"loss": ..., "model": model}`) under a key the file never reads are
    not kept on purpose: that loop is reported. Test code (a file pytest
    collects tests from, a test function) whose loops each walk a literal of
    a few items (`for nb_actions in (1, 3):`) is not reported: it builds a
    fixed, small number of models, one per case, and is no search.

    ## References
    - [tf.keras.backend.clear_session](https://www.tensorflow.org/api_docs/python/tf/keras/backend/clear_session)
    - [keras.utils.clear_session](https://keras.io/api/utils/backend_utils/#clearsession-function)
    """

    CODE = "MEM502"
    NAME = "keras-model-in-loop-without-clear-session"
    MESSAGE = "a Keras model is built in a loop without `clear_session()`: every iteration's model state accumulates"
    SEVERITY = Severity.WARNING
    FIX_TITLE = "Call `tf.keras.backend.clear_session()` at the start of each iteration"
    FIX_APPLICABILITY = Applicability.UNSAFE
    TRIGGERS = ("keras",)
    NEEDS_NAMES = ("keras",)
    FRAMEWORK = "tensorflow"
    VALID = (
        "import tensorflow as tf\nfor units in (8, 16):\n    tf.keras.backend.clear_session()\n    model = tf.keras.Sequential([tf.keras.layers.Dense(units)])\n    model.fit(x, y)\n",
        "import tensorflow as tf\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(8)])\nfor epoch in range(3):\n    model.fit(x, y)\n",
        "from keras import backend as K\nfrom keras.models import Sequential\ndef build():\n    K.clear_session()\n    return Sequential([])\nfor fold in range(5):\n    build().fit(x, y)\n",
        "import torch.nn as nn\nfor n in (8, 16):\n    model = nn.Sequential(nn.Linear(4, n))\n",
        "import tensorflow as tf\nclass Tower(tf.keras.layers.Layer):\n    def __init__(self, depth):\n        super().__init__()\n        self.blocks = [Block() for _ in range(depth)]\n        for i in range(depth):\n            self.heads.append(tf.keras.Sequential([tf.keras.layers.Dense(i)]))\nclass Block(tf.keras.layers.Layer):\n    pass\n",
        "from tensorflow import keras\ndef parse(spec):\n    layers = []\n    for n, width in spec:\n        block = keras.Sequential([keras.layers.Dense(width) for _ in range(n)])\n        layers.append(block)\n    return keras.Sequential(layers)\n",
    )
    INVALID = (
        "import tensorflow as tf\nfor units in (8, 16):\n    model = tf.keras.Sequential([tf.keras.layers.Dense(units)])  # expect: MEM502\n    model.fit(x, y)\n",
        "from tensorflow import keras\ndef build(n):\n    inputs = keras.Input((4,))\n    return keras.Model(inputs, keras.layers.Dense(n)(inputs))\ndef search(grid):\n    for n in grid:\n        m = build(n)  # expect: MEM502\n        m.fit(x, y)\n",
        "import keras\nclass Net(keras.Model):\n    pass\nfold = 0\nwhile fold < 5:\n    net = Net()  # expect: MEM502\n    fold += 1\n",
        "from keras.applications import ResNet50\nfor lr in (1e-3, 1e-4):\n    m = ResNet50(weights=None)  # expect: MEM502\n",
        "import optuna\nimport tensorflow as tf\ndef objective(trial):\n    units = trial.suggest_int('units', 8, 64)\n    model = tf.keras.Sequential([tf.keras.layers.Dense(units)])  # expect: MEM502\n    model.compile('adam', 'mse')\n    return model.evaluate(x, y)\nstudy = optuna.create_study()\nstudy.optimize(objective, n_trials=20)\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        semantic = self.ctx.semantic
        loops = semantic.enclosing_loops(node)
        function = semantic.function_of(node)
        if not loops and function is None:
            return
        repeated = not loops and self._driven(function)
        if not (loops or repeated) or not self._builds_model(node, depth=0, seen=set()):
            return
        if loops and self._bounded_test_loops(loops, function):
            return  # a test's loop over a few literal cases builds a fixed, small number of models
        if loops and self._in_enclosing_builder(node):
            return  # reported where the builder is called in a loop
        if loops and (self._builds_parts(node, loops[-1]) or self._ensemble(node, loops[-1])):
            return
        bodies = [loop.body for loop in loops] + ([function.body] if repeated else [])
        if any(_clears_session(body, self.ctx) for body in bodies):
            return
        self.report(node, fix=self._fix(loops[0]) if loops else None)

    def _bounded_test_loops(self, loops: list[ast.AST], function) -> bool:
        """The loops around the model run in test code (a file pytest collects
        tests from, or a test function) and each walks a literal of a few
        items (``for nb_actions in (1, 3):``, ``range(2)``): the test builds
        a fixed, small number of models, once per case, and is not a search
        whose iterations grow with a run."""
        semantic = self.ctx.semantic
        in_test = semantic.is_test_file or function is not None and (
            semantic.is_test_function(function) or any(semantic.is_test_function(a) for a in semantic.ancestors(function)))
        return in_test and all(isinstance(loop, (ast.For, ast.AsyncFor)) and _few_literal_items(loop.iter) for loop in loops)

    def _fix(self, loop: ast.AST) -> Fix | None:
        """``clear_session()`` as the first statement of the innermost loop
        that builds the model, spelled through an import of TensorFlow
        (``tf.keras.backend``) or Keras (``keras.backend``) that is bound
        where the loop runs; None when no such import is visible there (an
        ``import tensorflow`` inside another function only)."""
        if not isinstance(loop, (ast.For, ast.AsyncFor, ast.While)) or loop.body[0].lineno == loop.lineno:
            return None
        tensorflow = _visible_import(self.ctx.semantic, loop, ("tensorflow",))
        keras = _visible_import(self.ctx.semantic, loop, ("keras", "tensorflow.keras"))
        if tensorflow is not None:
            call = f"{tensorflow}.keras.backend.clear_session()"
        elif keras is not None:
            call = f"{keras}.backend.clear_session()"
        else:
            return None
        return self.fix(self.plan("prepend_to_body", loop, code=call + "\n"),
                        title=f"Call `{call}` at the start of each iteration")

    def _builds_parts(self, call: ast.Call, loop: ast.AST) -> bool:
        """The loop assembles one model: it runs in a Keras layer's or model's
        own method (``__init__``/``build`` creating sub-layers), or it keeps
        what it builds in a container or attribute and trains nothing."""
        semantic = self.ctx.semantic
        function = semantic.function_of(loop)
        klass = semantic.class_of_method(function) if function is not None else None
        if klass is not None and "keras" in klass.roles and "module" in klass.roles:
            return True
        return self._kept(call, loop) and not _trains_a_model(loop) and not self._builder_trains(call)

    def _builder_trains(self, call: ast.Call) -> bool:
        """``call`` runs a function of this file that compiles, fits, evaluates
        or predicts with a model it builds (``create_model(x, y, **params)``
        that fits and returns it): a trained model per iteration, not a part."""
        semantic = self.ctx.semantic
        function = semantic.callee(call) if semantic.may_call_local(call) else None
        return isinstance(function, FUNCTION_TYPES) and _trains_a_model(function)

    def _ensemble(self, call: ast.Call, loop: ast.AST) -> bool:
        """Every model the loop builds is kept on purpose: stored
        (``models.append(m)``) into a container that lives outside the
        outermost loop and is read after it (a deep ensemble, the best model
        of each fold). The container holds the models, so `clear_session()`
        would free nothing of theirs, and no model is dropped to leak."""
        semantic = self.ctx.semantic
        if self._model_left_in_record(call):
            return False
        for container in _containers_keeping(semantic, call, loop):
            if not semantic.outside(container, loop):
                continue
            if "." in container or _read_after(semantic, container, loop):
                return True
        return False

    def _model_left_in_record(self, call: ast.Call) -> bool:
        """``call`` runs a function of this file that returns a record (a dict
        display) holding the model it builds under a key that the file never
        reads (``return {"loss": -acc, "model": model}`` and only ``r["loss"]``
        used): the models stay in the records without being used, so keeping
        them is no ensemble."""
        semantic = self.ctx.semantic
        function = semantic.callee(call) if semantic.may_call_local(call) else None
        if not isinstance(function, FUNCTION_TYPES):
            return False
        returns = [node.value for node in semantic.own_nodes(function, (ast.Return,)) if node.value is not None]
        if not returns or not all(isinstance(value, ast.Dict) for value in returns):
            return False
        built = self._names_of_built_models(function)
        keys = {key.value for value in returns for key, item in zip(value.keys, value.values)
                if isinstance(key, ast.Constant) and isinstance(item, ast.Name) and item.id in built}
        return bool(keys) and not (keys & _keys_read(self.ctx.module))

    def _names_of_built_models(self, function) -> set[str]:
        """Names that ``function`` binds to a Keras model it builds."""
        names = set()
        for node in self.ctx.semantic.own_nodes(function, (ast.Assign,)):
            if isinstance(node.value, ast.Call) and self._builds_model(node.value, depth=1, seen=set()):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return names

    def _kept(self, call: ast.Call, loop: ast.AST) -> bool:
        """What ``call`` builds is stored: appended, put in a list, set as an attribute or item."""
        parent = self.ctx.semantic.parents.get(call)
        if isinstance(parent, (ast.List, ast.Tuple)) or (
                isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr in STORING_METHODS):
            return True
        if isinstance(parent, ast.IfExp):
            parent = self.ctx.semantic.parents.get(parent)
        if not isinstance(parent, ast.Assign):
            return False
        if any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in parent.targets):
            return True
        names = {t.id for t in parent.targets if isinstance(t, ast.Name)}
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in STORING_METHODS
                   and any(isinstance(a, ast.Name) and a.id in names for a in n.args) for n in ast.walk(loop))

    def _driven(self, function) -> bool:
        """A function a driver calls once per trial (an Optuna objective)."""
        repetition = self.ctx.semantic.driven_repetition(function)
        return repetition is not None and repetition.reason == "driver"

    def _in_enclosing_builder(self, node: ast.Call) -> bool:
        """A model built inside a loop of a builder function that itself clears the session."""
        function = self.ctx.semantic.function_of(node)
        return isinstance(function, FUNCTION_TYPES) and _clears_session(function.body, self.ctx)

    def _builds_model(self, call: ast.Call, depth: int, seen: set) -> bool:
        semantic = self.ctx.semantic
        qualified = semantic.qualified(call.func) or ""
        if KERAS_MODEL.match(qualified):
            return True
        klass = _local_class(semantic, call.func)
        if klass is not None:  # a Model subclass; a Layer subclass made per iteration builds one model's layers
            return "keras_model" in klass.roles
        if depth >= MAX_DEPTH or not semantic.may_call_local(call):
            return False  # not a call of the file's functions: nothing to follow
        function = semantic.callee(call)
        if not isinstance(function, FUNCTION_TYPES) or function in seen:
            return False
        seen.add(function)
        if _clears_session(function.body, self.ctx):
            return False
        finder = _Calls()
        walk_visit(function.body, finder)
        return any(self._builds_model(inner, depth + 1, seen) for inner in finder.calls)


def _few_literal_items(iterable: ast.expr) -> bool:
    """A literal iterable (:func:`~memlint.lint.semantic.operations.literal_iterable`:
    a display, a small literal ``range``) of at most ``SMALL_RANGE`` items."""
    if not literal_iterable(iterable):
        return False
    return not isinstance(iterable, (ast.Tuple, ast.List, ast.Set)) or len(iterable.elts) <= SMALL_RANGE


def _containers_keeping(semantic, call: ast.Call, loop: ast.AST) -> list[str]:
    """The containers (``models``, ``self.members``) into which ``loop``
    stores what ``call`` builds: ``c.append(Build())``, ``c[k] = Build()``, or
    ``m = Build()`` then ``c.append(m)`` / ``c[k] = m`` in the loop, ``m``
    bound nowhere else in it."""
    parent = semantic.parents.get(call)
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr in STORING_METHODS:
        name = dotted_name(parent.func.value)
        return [name] if name else []
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Subscript):
        name = dotted_name(parent.targets[0].value)  # `best[fold] = Build()`
        return [name] if name else []
    if not isinstance(parent, ast.Assign) or len(parent.targets) != 1 or not isinstance(parent.targets[0], ast.Name):
        return []
    built = parent.targets[0].id
    rebinds = [n for n in ast.walk(loop) if isinstance(n, ast.Name) and n.id == built and isinstance(n.ctx, ast.Store)]
    if len(rebinds) != 1:
        return []  # the name is bound to something else as well: not the built model for sure
    found = []
    for node in ast.walk(loop):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STORING_METHODS \
                and any(isinstance(a, ast.Name) and a.id == built for a in node.args) and node.lineno >= parent.lineno:
            name = dotted_name(node.func.value)
            if name:
                found.append(name)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript) \
                and isinstance(node.value, ast.Name) and node.value.id == built and node.lineno >= parent.lineno:
            name = dotted_name(node.targets[0].value)  # `best[fold] = m`
            if name:
                found.append(name)
    return found


def _read_after(semantic, name: str, loop: ast.AST) -> bool:
    """``name`` is read after ``loop`` ends, in the unit that runs the loop."""
    unit = semantic.unit_of(loop)
    end = (loop.end_lineno or loop.lineno, loop.end_col_offset or 0)
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
               and (n.lineno, n.col_offset) > end and semantic.unit_of(n) is unit for n in ast.walk(unit))


def _visible_import(semantic, loop: ast.AST, modules: tuple[str, ...]) -> str | None:
    """A name that, in the scope where ``loop`` runs, is bound only by
    imports of one of ``modules`` made before the loop runs (at module level
    for a loop in a function, else on an earlier line): the name the
    inserted call can use.
    The plain module name is preferred to an alias; None when there is none."""
    scopes = semantic.scopes
    here = scopes.scope_for(loop)
    names = sorted({binding.name for scope in scopes.scopes.values() for bindings in scope.bindings.values()
                    for binding in bindings if binding.kind is BindingKind.IMPORT and binding.qualified in modules},
                   key=lambda name: (name not in modules, name))
    for name in names:
        owner = scopes.binding_scope(name, here)
        bindings = owner.bindings[name] if owner is not None else []
        if not bindings or not all(b.kind is BindingKind.IMPORT and b.qualified in modules for b in bindings):
            continue
        if (owner is scopes.module_scope and here is not owner) or all(b.node.lineno < loop.lineno for b in bindings):
            return name
    return None


def _local_class(semantic, func: ast.expr):
    """The class of this file a plain name refers to, by scope."""
    if not isinstance(func, ast.Name):
        return None
    bindings = semantic.scopes.bindings_of(func.id, semantic.scopes.scope_for(func))
    classes = [b.node for b in bindings if b.kind is BindingKind.CLASS]
    return semantic.classes.of(classes[0]) if len(classes) == 1 else None


def _keys_read(module: ast.Module) -> set:
    """Constant keys the module reads from a mapping: ``r["model"]``, ``r.get("model")``, ``r.pop("model")``."""
    found = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant):
            found.add(node.slice.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop", "setdefault") \
                and node.args and isinstance(node.args[0], ast.Constant):
            found.add(node.args[0].value)
    return found


def _trains_a_model(loop: ast.AST) -> bool:
    """The loop compiles, fits, evaluates or predicts with a model (Keras 3 ``Model`` methods)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MODEL_USE_METHODS
               for n in ast.walk(loop))


def _clears_session(body: list[ast.stmt], ctx) -> bool:
    finder = _Calls()
    walk_visit(body, finder)
    return any(CLEAR_SESSION.match(ctx.qualified(call.func) or "") for call in finder.calls)


class _Calls(Visitor):
    def __init__(self) -> None:
        self.calls: list[ast.Call] = []

    def visit_Call(self, node: ast.Call) -> None:
        self.calls.append(node)
