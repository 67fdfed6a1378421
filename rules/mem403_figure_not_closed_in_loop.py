"""MEM403 figure-not-closed-in-loop."""

from __future__ import annotations

import ast

from memlint.lint.diagnostic import Severity
from memlint.lint.rule import Rule
from memlint.lint.semantic.frameworks import GRADIENT_TAPE
from memlint.lint.semantic.scopes import BindingKind
from memlint.lint.signatures import arguments_bound, default_of
from memlint.lint.syntax import FOR_TYPES, FUNCTION_TYPES, LOOP_TYPES, is_constant

#: pyplot calls that create a figure and register it with pyplot's figure manager
#: (matplotlib 3.x ``pyplot.py``: ``figure``, ``subplots``, ``subplot_mosaic`` all go
#: through ``figure()``; the figure stays in ``Gcf`` until ``close``).
CREATORS = frozenset({"matplotlib.pyplot.figure", "matplotlib.pyplot.subplots", "matplotlib.pyplot.subplot_mosaic"})
#: pyplot calls after which the loop's figure no longer accumulates: ``close`` (one
#: figure, the current one, or ``"all"``), ``clf`` (clears the figure's artists),
#: ``show`` (blocking with a GUI backend until the window is closed: cannot decide).
CLOSERS = frozenset({"matplotlib.pyplot.close", "matplotlib.pyplot.clf", "matplotlib.pyplot.show"})
#: ``Figure`` methods that drop what it draws (``Figure.clf``/``clear``).
CLEARING_METHODS = frozenset({"clf", "clear"})
#: ``SummaryWriter.add_figure(tag, figure, global_step=None, close=True, walltime=None)``
#: closes the figure unless ``close=False`` (torch 2.13 ``torch/utils/tensorboard/writer.py``,
#: line 729; tensorboardX has the same signature).
ADD_FIGURE = "add_figure"
ADD_FIGURE_CLOSE_INDEX = 3
#: Libraries whose functions take a figure and never close it (they render or keep it).
NON_CLOSING_LIBRARIES = ("matplotlib.", "numpy.", "wandb.", "mlflow.", "PIL.", "io.", "cv2.", "builtins.")
#: Methods that keep what they are given (the figure stays alive, and in pyplot).
#: The names of a figure that a called function created: none of the caller's, so only
#: ``plt.close()``/``plt.close("all")``/``plt.clf()`` of the caller close it.
ELSEWHERE = frozenset({"<a figure of the called function>"})
KEEPING_METHODS = frozenset({"append", "extend", "insert", "add", "savefig", "tight_layout", "suptitle", "colorbar"})


#: pyplot warns when more figures than this are open (matplotlib 3.11.2
#: lib/matplotlib/mpl-data/matplotlibrc ``figure.max_open_warning: 20``).
MAX_OPEN_WARNING = 20


REPEATED_MESSAGE = ("matplotlib figure created in a function that runs repeatedly is never closed: pyplot keeps every "
                    "figure alive; call `plt.close(fig)`")

#: Calls that switch matplotlib's backend (matplotlib 3.x ``matplotlib/__init__.py`` ``use``,
#: ``pyplot.switch_backend``).
BACKEND_SWITCHES = frozenset({"matplotlib.use", "matplotlib.pyplot.switch_backend"})
#: What a notebook's ``%matplotlib`` magic may select and still leave the inline backend:
#: the bare magic (the kernel's default) and ``inline``. A Jupyter kernel's default is
#: inline: ipykernel sets ``MPLBACKEND=module://matplotlib_inline.backend_inline`` unless
#: it is set (ipython/ipykernel ``ipykernel/kernelapp.py`` ``IPKernelApp.init_gui_pylab``,
#: commit 0021a6a7b823). The inline backend closes every figure when a cell ends: its
#: ``flush_figures`` runs as an IPython ``post_execute`` callback and calls ``show(True)``,
#: which issues ``plt.close("all")`` while ``InlineBackend.close_figures`` is True, its
#: default (matplotlib-inline 0.2.2 ``matplotlib_inline/backend_inline.py`` ``flush_figures``
#: and ``show``; ``matplotlib_inline/config.py`` ``close_figures = Bool(True, ...)``).
INLINE_BACKENDS = frozenset({"", "inline"})


class FigureNotClosedInLoop(Rule):
    """## What it does
    Reports a matplotlib figure created with `plt.figure()`,
    `plt.subplots()` or `plt.subplot_mosaic()` inside a loop that repeats
    with the run (over batches, a training loop over epochs, a `while`
    loop) or with the data on disk (over the records of a JSON or pickle
    file, `for image in coco["images"]`, the rows of an array that
    `np.load` read, or the entries of `os.listdir`/`os.walk`/`glob.glob`
    and of `Path.glob`/`rglob`/`iterdir`, or a loop that loads a file named
    by its item each iteration: `nib.load(path)`, `Image.open(path)`,
    `np.load(path)`), or over a `range` or display the file fixes to more
    than 20 items (`for i in range(100)`), or over a parameter that every
    call of the file fills with more than 20 items (pyplot's
    `figure.max_open_warning`), or over `range(n)` of a parameter `n` that
    is more than 20 for every call of the file (its default when no call
    passes it: `def train(..., epochs=200_000)`, even when the loop trains
    with numpy and plots only every k-th step), or in a function that such a loop, a driver or a framework hook
    (once per batch or epoch) calls, when nothing in that loop or function
    closes it: no `plt.close(fig)`, `plt.close()`, `plt.close("all")`,
    `fig.clf()`/`plt.clf()`, and no `SummaryWriter.add_figure(...)` with its
    default `close=True`. A bare `plt.close()`/`plt.clf()` acts on the
    current figure only: after `plt.figure()` then `plt.subplots()`, it
    closes the second and the first stays open.

    ## Why is this bad?
    pyplot keeps a reference to every figure it creates until it is closed,
    so rebinding `fig` frees nothing: each iteration adds a figure with all
    its artists and image buffers. Host memory grows per batch or per
    epoch (matplotlib warns after 20 open figures) until the job is killed.

    ## Example
    ```python
    for epoch in range(epochs):
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        fig, ax = plt.subplots()
        ax.plot(history["loss"])
        fig.savefig(f"loss_{epoch}.png")
    ```

    ## Use instead
    ```python
    for epoch in range(epochs):
        ...
        fig, ax = plt.subplots()
        ax.plot(history["loss"])
        fig.savefig(f"loss_{epoch}.png")
        plt.close(fig)
    ```

    ## Known problems
    Only loops the semantic model knows to repeat with the run count (a
    TensorFlow custom training loop counts by its `tf.GradientTape`
    `gradient` call): a loop over a few plots (attention heads, metrics, a
    literal list) is not reported unless its function runs once per epoch
    or step (a framework hook, a function called from a step loop) and
    never closes them, and neither is a loop that does no model work over
    something the file does not show to come from disk (a parameter, a
    YAML configuration's entries), unless every call of the file passes that
    parameter a list display or a `range` comprehension of more than 20
    items (one figure per entry of a results dict handed in, `for name, res
    in results.items()`, is not reported: the file does not say how many
    there are). A
    figure with an explicit number or label (`plt.figure(1)`,
    `plt.figure("loss")`) reuses one figure and is not reported, even when
    the number changes per iteration. A function that returns its figure
    leaves closing to its caller and is not reported. A figure handed to a
    function this file cannot see (a logger of another module) may be
    closed there: not reported; what a call made on the figure returns
    (`figure_to_array(fig)`, `fig.canvas.buffer_rgba()`) is not the figure,
    unless that call is a function of the file that returns one of its
    parameters. `plt.show()` in the loop counts as closing
    (with a GUI backend the user closes the window). `Figure(...)` built
    without pyplot is not tracked by pyplot and is never reported.

    In a notebook that keeps Jupyter's inline backend (no `%matplotlib`
    magic naming another backend, no `matplotlib.use(...)`), the backend
    closes every figure when a cell ends, so a loop of a cell's own code,
    or of a function that cells call, is not reported when neither it nor
    a loop around its call sites is a training step in its own body, walks
    a stream of batches or the files on disk, is a `while` loop, or runs a
    `range` the file fixes to more than 20 iterations (a few sample
    predictions plotted one by one; a helper that draws a few figures after
    each epoch, the epoch's batches walked by a nested loop); those loops
    still are, since their figures pile up until the cell ends. The rule does
    not read `MPLBACKEND` or the IPython configuration
    (`InlineBackend.close_figures = False`).

    ## References
    - [matplotlib.pyplot.close](https://matplotlib.org/stable/api/_as_gen/matplotlib.pyplot.close.html)
    - [rcParams `figure.max_open_warning`](https://matplotlib.org/stable/users/explain/customizing.html)
    - [torch.utils.tensorboard.SummaryWriter.add_figure](https://pytorch.org/docs/stable/tensorboard.html#torch.utils.tensorboard.writer.SummaryWriter.add_figure)
    """

    CODE = "MEM403"
    NAME = "figure-not-closed-in-loop"
    MESSAGE = "matplotlib figure created in a loop is never closed there: pyplot keeps every figure alive; call `plt.close(fig)`"
    SEVERITY = Severity.WARNING
    TRIGGERS = ("pyplot",)
    NEEDS_NAMES = ("pyplot",)
    VALID = (
        "import matplotlib.pyplot as plt\nfrom torch.utils.data import DataLoader\nfor step, batch in enumerate(DataLoader(data)):\n    fig, ax = plt.subplots()\n    ax.imshow(batch[0])\n    fig.savefig(f'{step}.png')\n    plt.close(fig)\n",
        "from matplotlib import pyplot as plt\nfrom torch.utils.data import DataLoader\nfrom torch.utils.tensorboard import SummaryWriter\nwriter = SummaryWriter()\nfor step, batch in enumerate(DataLoader(data)):\n    fig = plt.figure()\n    plt.imshow(batch[0])\n    writer.add_figure('sample', fig, step)\n",
        "import matplotlib.pyplot as plt\nwhile not done:\n    done = step()\n    plt.figure('loss')\n    plt.plot(losses)\n    plt.savefig('loss.png')\n",
        "import matplotlib.pyplot as plt\ndef plot(xs):\n    fig, ax = plt.subplots()\n    ax.plot(xs)\n    return fig\nwhile training:\n    fig = plot(run())\n    fig.savefig('now.png')\n    plt.close('all')\n",
        "import matplotlib.pyplot as plt\nfor head in range(n_heads):\n    fig = plt.figure()\n    plt.imshow(attention[head])\n    fig.savefig(f'head{head}.png')\n",
        "from matplotlib.figure import Figure\nwhile training:\n    fig = Figure()\n    fig.subplots().plot(run())\n    fig.savefig('now.png')\n",
    )
    INVALID = (
        "import matplotlib.pyplot as plt\nfrom torch.utils.data import DataLoader\nfor step, batch in enumerate(DataLoader(data)):\n    fig, ax = plt.subplots()  # expect: MEM403\n    ax.imshow(batch[0])\n    fig.savefig(f'{step}.png')\n",
        "import matplotlib.pyplot as plt\nfrom torch.utils.tensorboard import SummaryWriter\nwriter = SummaryWriter()\nstep = 0\nwhile step < steps:\n    fig = plt.figure()  # expect: MEM403\n    plt.imshow(sample())\n    writer.add_figure('sample', fig, step, close=False)\n    step += 1\n",
        "import matplotlib.pyplot as plt\ndef save_curve(values, path):\n    plt.figure(figsize=(6, 4))  # expect: MEM403\n    plt.plot(values)\n    plt.savefig(path)\ndef train(model, loader, opt):\n    for epoch in range(100):\n        for x, y in loader:\n            model(x).sum().backward()\n            opt.step()\n        save_curve(losses, f'{epoch}.png')\n",
        "import matplotlib.pyplot as plt\nimport keras\nclass Plot(keras.callbacks.Callback):\n    def on_epoch_end(self, epoch, logs=None):\n        fig, axes = plt.subplot_mosaic([['a', 'b']])  # expect: MEM403\n        axes['a'].plot(self.losses)\n        fig.savefig(f'{epoch}.png')\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        qualified = self.ctx.qualified(node.func)
        if qualified not in CREATORS or _numbered(node, qualified):
            return
        semantic = self.ctx.semantic
        if self._closed_by_inline_backend(node):
            return
        names = _figure_names(node, semantic.parents)
        loops = semantic.run_loops(node) or self._loops_over_files(node) or self._tape_step_loops(node) \
            or self._loops_over_many(node)
        if loops:
            if not self._closes(loops[0].body, names, created=node):
                self.report(node)
            return
        if semantic.enclosing_loops(node):
            # a loop over a few plots (heads, metrics, samples) does not grow with the run, unless
            # its function runs again and again (a per-epoch hook) and never closes them
            function = semantic.function_of(node)
            if isinstance(function, FUNCTION_TYPES) and self._repeated_without_close(function, node, names):
                self.report(node, message=REPEATED_MESSAGE)
            return
        comprehension = semantic.comprehension_of(node)
        if comprehension is not None:
            if semantic.is_run_comprehension(comprehension):
                self.report(node)
            return
        function = semantic.function_of(node)
        if isinstance(function, FUNCTION_TYPES) and self._repeated_without_close(function, node, names):
            self.report(node, message=REPEATED_MESSAGE)

    # -- a notebook's inline backend -----------------------------------------------------
    def _closed_by_inline_backend(self, node: ast.Call) -> bool:
        """In a notebook that keeps Jupyter's inline backend, the figures a
        cell makes are closed when the cell ends (:data:`INLINE_BACKENDS`):
        a loop of the cell's own code, or of a function that cells call
        outside any loop, leaves nothing behind. Not when a loop around the
        figure walks a stream of batches or the files on disk, trains or is
        a ``while``, nor in a comprehension, nor over more items than pyplot
        opens without a warning (:meth:`_loops_over_many`): those repeat
        with the run (or the data) inside one cell, and every figure stays
        open until the cell ends."""
        if self.ctx.notebook is None or not self._keeps_inline_backend() or self._loops_over_many(node):
            return False
        semantic = self.ctx.semantic
        if semantic.comprehension_of(node) is not None:
            return False
        if any(self._piles_up_in_cell(loop) for loop in semantic.enclosing_loops(node)):
            return False
        function = semantic.function_of(node)
        if function is None:
            return semantic.unit_of(node) is self.ctx.module
        sites = semantic.call_sites_of(function)
        return bool(sites) and all(
            semantic.unit_of(site) is self.ctx.module
            and not any(self._piles_up_in_cell(loop) for loop in semantic.enclosing_loops(site))
            for site in sites)

    def _piles_up_in_cell(self, loop: ast.AST) -> bool:
        """A loop whose figures (one or a few per iteration) outnumber what
        pyplot opens without a warning before its cell ends: a ``while``, a
        loop over a stream of batches or over the files on disk, a loop whose
        own body is a training step (one figure per step), or one that the
        file fixes to more than :data:`MAX_OPEN_WARNING` iterations. A loop
        over epochs that trains only in a nested loop over the batches and
        then plots a few figures is the cell's output, shown and closed when
        the cell ends, unless its count is known to be larger than that."""
        from memlint.lint.semantic.values import Tri

        semantic = self.ctx.semantic
        if isinstance(loop, ast.While) or semantic.walks_file_contents(loop) \
                or semantic.value(loop.iter).stream is Tri.YES:
            return True
        count = semantic.range_count(loop.iter)
        if count is not None:
            return count > MAX_OPEN_WARNING
        return semantic.trains([statement for statement in loop.body if not isinstance(statement, LOOP_TYPES)])

    def _keeps_inline_backend(self) -> bool:
        """No ``%matplotlib``/``%pylab`` magic of the notebook selects another
        backend and no code switches it (``matplotlib.use``)."""
        found = self.__dict__.get("_inline")
        if found is None:
            found = all(backend in INLINE_BACKENDS for backend in self.ctx.notebook.backends) and not any(
                isinstance(call, ast.Call) and self.ctx.qualified(call.func) in BACKEND_SWITCHES
                for call in ast.walk(self.ctx.module))
            self.__dict__["_inline"] = found
        return found

    def _loops_over_files(self, node: ast.Call) -> list[ast.AST]:
        """The loops around ``node`` over the records of a data file or the
        entries of a directory (:meth:`walks_file_contents`), or that load a
        file named by their item each iteration (:meth:`reads_a_file_per_item`:
        ``nib.load(path)``), innermost first: one figure per image or per
        record grows with the data on disk."""
        semantic = self.ctx.semantic
        return [loop for loop in semantic.enclosing_loops(node)
                if semantic.walks_file_contents(loop) or semantic.reads_a_file_per_item(loop)]

    def _loops_over_many(self, node: ast.AST) -> list[ast.AST]:
        """The loops around ``node`` that run more times than pyplot opens
        figures without a warning: over a ``range`` or display the file fixes
        to more than :data:`MAX_OPEN_WARNING` items (``for i in range(100)``),
        or over a parameter of their function that every call of the file
        fills with that many (``run_all([{...} for i in range(40)])``): one
        figure per item leaves more figures open than pyplot itself warns about."""
        semantic = self.ctx.semantic
        found = []
        for loop in semantic.enclosing_loops(node):
            if not isinstance(loop, FOR_TYPES):
                continue
            fixed = semantic.range_count(loop.iter) if isinstance(loop.iter, ast.Call) else _length(semantic, loop.iter)
            if fixed is not None and fixed > MAX_OPEN_WARNING:
                found.append(loop)
                continue
            function = semantic.function_of(loop)
            if not isinstance(function, FUNCTION_TYPES):
                continue
            if isinstance(loop.iter, ast.Name) and self._always_many(function, loop.iter) \
                    or self._range_of_many(function, loop.iter):
                found.append(loop)
        return found

    def _range_of_many(self, function: ast.AST, iterable: ast.expr) -> bool:
        """``iterable`` is ``range(n)`` over a parameter ``n`` of ``function``
        that is, for every call of the file, a constant of more than
        :data:`MAX_OPEN_WARNING` steps: its default when no call passes it
        (``def train(..., epochs=200_000)``), or what each call passes. A
        figure left open per step (or per every k-th step of such a run)
        piles up past pyplot's own warning."""
        if not (isinstance(iterable, ast.Call) and self.ctx.qualified(iterable.func) in ("range", "builtins.range")
                and len(iterable.args) == 1 and not iterable.keywords and isinstance(iterable.args[0], ast.Name)):
            return False
        name = iterable.args[0]
        semantic = self.ctx.semantic
        bindings = semantic.scopes.bindings_of(name.id, semantic.scopes.scope_for(name))
        if len(bindings) != 1 or bindings[0].kind is not BindingKind.PARAMETER:
            return False
        default = default_of(function, name.id)
        counts = []
        for call in semantic.call_sites_of(function):
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                return False
            given = self._given(call, function, name.id)
            counts.append(given if given is not None else default)
        if not counts:
            counts = [default]
        values = [semantic.constants.value(count) if count is not None else None for count in counts]
        return all(type(value) is int and value > MAX_OPEN_WARNING for value in values)

    def _always_many(self, function: ast.AST, name: ast.Name) -> bool:
        """``name`` is only a parameter of ``function``, and each of its calls
        in the file passes a list of more than :data:`MAX_OPEN_WARNING` items."""
        semantic = self.ctx.semantic
        bindings = semantic.scopes.bindings_of(name.id, semantic.scopes.scope_for(name))
        if not bindings or any(binding.kind is not BindingKind.PARAMETER for binding in bindings):
            return False
        sites = semantic.call_sites_of(function)
        if not sites:
            return False
        for call in sites:
            given = self._given(call, function, name.id)
            length = _length(semantic, given) if given is not None else None
            if length is None or length <= MAX_OPEN_WARNING:
                return False
        return True

    def _given(self, call: ast.Call, function: ast.AST, parameter: str) -> ast.expr | None:
        """The argument ``call`` passes for ``parameter`` of ``function``
        (a method's receiver is the instance it is called on)."""
        on_instance = self.ctx.semantic.class_of_method(function) is not None
        return arguments_bound(call, function, skip_receiver=on_instance).get(parameter)

    def _tape_step_loops(self, node: ast.AST) -> list[ast.AST]:
        """The loops around ``node`` (innermost first) whose own body takes
        gradients with a ``tf.GradientTape`` (``tape.gradient(loss, ...)``):
        a TensorFlow custom training loop, one iteration per step."""
        semantic = self.ctx.semantic
        found = []
        for loop in semantic.enclosing_loops(node):
            for call in ast.walk(loop):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "gradient" \
                        and semantic.value(call.func.value).type_name == GRADIENT_TAPE:
                    found.append(loop)
                    break
        return found

    # -- a function that makes a figure per call ---------------------------------------
    def _repeated_without_close(self, function: ast.AST, call: ast.Call, names: frozenset[str]) -> bool:
        if self._closes(function.body, names, created=call) or _returns_figure(function, call, names):
            return False
        semantic = self.ctx.semantic
        repetition = semantic.repetition(function)
        if repetition is not None and repetition.reason in ("hook", "driver"):
            return True
        for site in semantic.call_sites_of(function):
            loops = semantic.run_loops(site) or self._loops_over_files(site) or self._tape_step_loops(site) \
                or self._loops_over_many(site)
            if loops and not self._closes(loops[0].body, ELSEWHERE):
                return True
            if not loops and semantic.repetition(semantic.unit_of(site)) is not None and not self._closes(
                    semantic.unit_of(site).body, ELSEWHERE):
                return True
        return False

    # -- what closes the figure ------------------------------------------------------------
    def _current_is_another(self, created: ast.Call | None, close: ast.Call, qualified: str) -> bool:
        """``plt.close()``/``plt.clf()`` without a figure closes pyplot's current
        figure (matplotlib 3.x ``pyplot.close``: ``None`` closes ``gcf()``): when
        another figure was created after ``created`` (``plt.figure()`` then
        ``plt.subplots()``), that later one is current and ``created`` stays open."""
        if created is None or close.args or close.keywords or qualified == "matplotlib.pyplot.show":
            return False
        semantic = self.ctx.semantic
        unit = semantic.unit_of(created)
        if semantic.unit_of(close) is not unit:
            return False
        return _creates_between(self, unit, created, close)

    def _closes(self, body: list[ast.stmt], names: frozenset[str], depth: int = 0, created: ast.Call | None = None) -> bool:
        """Something in ``body`` closes or clears the figure (or may: it is handed to code this file cannot see).
        A bare ``plt.close()``/``plt.clf()`` acts on the current figure: not on the one ``created``
        made when another figure was created after it, before the close."""
        semantic = self.ctx.semantic
        for statement in body:
            for node in ast.walk(statement):
                if not isinstance(node, ast.Call):
                    continue
                qualified = self.ctx.qualified(node.func)
                if qualified in CLOSERS:
                    if _closes_another(node, names) or self._current_is_another(created, node, qualified):
                        continue
                    return True
                method = node.func.attr if isinstance(node.func, ast.Attribute) else None
                if method in CLEARING_METHODS and (not names or _mentions(node.func.value, names)):
                    return True
                if method == ADD_FIGURE and (not names or any(_mentions(arg, names) for arg in _arguments(node))):
                    if _keeps_open(node):
                        continue
                    return True
                if not names or not any(self._hands(arg, names) for arg in _arguments(node)):
                    continue
                if method in KEEPING_METHODS or (qualified is not None and qualified.startswith(NON_CLOSING_LIBRARIES)):
                    continue
                callee = semantic.callee(node) if semantic.may_call_local(node) else None
                if isinstance(callee, FUNCTION_TYPES):
                    if depth < 1 and self._closes(callee.body, frozenset(), depth + 1):
                        return True
                    continue
                return True  # handed to code this file does not show: it may close the figure
        return False

    def _hands(self, argument: ast.expr, names: frozenset[str]) -> bool:
        """``argument`` is the figure, or holds it (``fig``, ``fig.canvas``,
        ``[fig, ax]``), and not only the result of a call made on it
        (``figure_to_array(fig)``, ``np.asarray(fig.canvas.buffer_rgba())``):
        that call is judged on its own, and what it returns is another
        value, unless it is a function of this file that returns one of its
        parameters (it may hand the figure back)."""
        if isinstance(argument, ast.Name):
            return argument.id in names
        if isinstance(argument, ast.Call):
            semantic = self.ctx.semantic
            callee = semantic.callee(argument) if semantic.may_call_local(argument) else None
            if not isinstance(callee, FUNCTION_TYPES) or not _returns_parameter(callee):
                return False
            return any(self._hands(arg, names) for arg in _arguments(argument))
        return any(self._hands(child, names) for child in ast.iter_child_nodes(argument) if isinstance(child, ast.expr))


def _length(semantic, expr: ast.expr) -> int | None:
    """How many items ``expr`` holds when the file fixes it: a list or tuple
    display without ``*``, or a comprehension with one ``for`` over
    ``range(...)`` of constant bounds and no condition; None otherwise."""
    if isinstance(expr, (ast.List, ast.Tuple)):
        return None if any(isinstance(e, ast.Starred) for e in expr.elts) else len(expr.elts)
    if not isinstance(expr, (ast.ListComp, ast.GeneratorExp)) or len(expr.generators) != 1 or expr.generators[0].ifs:
        return None
    return semantic.range_count(expr.generators[0].iter)


def _returns_parameter(function: ast.AST) -> bool:
    """A ``return`` of ``function`` gives back one of its parameters as it is (``return fig``)."""
    parameters = {arg.arg for arg in ast.walk(function.args) if isinstance(arg, ast.arg)}
    return any(isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.value.id in parameters
               for node in ast.walk(function))


def _creates_between(rule, unit: ast.AST, first: ast.Call, last: ast.Call) -> bool:
    """A pyplot call of ``unit`` after ``first`` and before ``last`` (in the
    same straight-line order of lines) creates a new figure."""
    start, end = (first.lineno, first.col_offset), (last.lineno, last.col_offset)
    for node in rule.ctx.semantic.own_nodes(unit, (ast.Call,)):
        if node is first or not start < (node.lineno, node.col_offset) < end:
            continue
        qualified = rule.ctx.qualified(node.func)
        if qualified in CREATORS and not _numbered(node, qualified):
            return True
    return False


def _numbered(call: ast.Call, qualified: str) -> bool:
    """``plt.figure(num)`` / ``num=...``: pyplot returns the existing figure of that number or label."""
    if any(keyword.arg == "num" for keyword in call.keywords):
        return True
    return qualified == "matplotlib.pyplot.figure" and bool(call.args)


def _closes_another(call: ast.Call, names: frozenset[str]) -> bool:
    """``plt.close(other)``: a figure named otherwise than the one created (``plt.close()``,
    ``plt.close("all")`` and a figure reached through an expression may be ours)."""
    if not call.args or not names:
        return False
    target = call.args[0]
    return isinstance(target, ast.Name) and target.id not in names


def _figure_names(call: ast.Call, parents) -> frozenset[str]:
    """Names the created figure is bound to (``fig = plt.figure()``, ``fig, ax = plt.subplots()``)."""
    parent = parents.get(call)
    if not isinstance(parent, ast.Assign):
        return frozenset()
    found = set()
    for target in parent.targets:
        if isinstance(target, ast.Name):
            found.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)) and target.elts and isinstance(target.elts[0], ast.Name):
            found.add(target.elts[0].id)
    return frozenset(found)


def _returns_figure(function: ast.AST, call: ast.Call, names: frozenset[str]) -> bool:
    for node in ast.walk(function):
        if isinstance(node, (ast.Return, ast.Yield)) and node.value is not None:
            if any(child is call for child in ast.walk(node.value)) or _mentions(node.value, names):
                return True
    return False


def _keeps_open(call: ast.Call) -> bool:
    """``add_figure(..., close=False)``: the writer leaves the figure open."""
    for keyword in call.keywords:
        if keyword.arg == "close":
            return is_constant(keyword.value, False)
    if len(call.args) > ADD_FIGURE_CLOSE_INDEX:
        return is_constant(call.args[ADD_FIGURE_CLOSE_INDEX], False)
    return False


def _arguments(call: ast.Call):
    yield from call.args
    for keyword in call.keywords:
        yield keyword.value


def _mentions(node: ast.AST, names: frozenset[str]) -> bool:
    return bool(names) and any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))
