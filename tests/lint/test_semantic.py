"""The semantic model (memlint.lint.semantic): what values are, by
construction and use, never by name; grad mode; loops and what a framework
repeats; what the file's own functions do with their arguments; scopes."""

from __future__ import annotations

import ast
import textwrap

import pytest

from memlint.lint.context import FileContext
from memlint.lint.semantic.values import Kind, Tri


def model_of(source: str):
    source = textwrap.dedent(source)
    module = ast.parse(source)
    return FileContext("t.py", source, module).semantic, module


def node_at(module: ast.AST, line: int, kind: type = ast.Call):
    """The outermost node of ``kind`` that starts on ``line``."""
    found = [n for n in ast.walk(module) if isinstance(n, kind) and getattr(n, "lineno", None) == line]
    assert found, (line, kind)
    return min(found, key=lambda n: n.col_offset)


def value_at(source: str, line: int, kind: type = ast.Call):
    model, module = model_of(source)
    return model.value(node_at(module, line, kind))


# -- modules by construction and use ------------------------------------------------------
MODULES = {
    "torch.nn constructor": "import torch.nn as nn\nm = nn.Linear(2, 2)\n",
    "class of the file": "import torch\nclass Net(torch.nn.Module):\n    pass\nm = Net()\n",
    "class through an in-file base": "from torch import nn\nclass Base(nn.Module):\n    pass\nclass Net(Base):\n    pass\nm = Net()\n",
    "from_pretrained": "from transformers import AutoModelForCausalLM\nm = AutoModelForCausalLM.from_pretrained('gpt2')\n",
    "compile of a module": "import torch\nm = torch.compile(torch.nn.Linear(2, 2))\n",
    "Lightning module": "import lightning as L\nclass Lit(L.LightningModule):\n    pass\nm = Lit()\n",
}


@pytest.mark.parametrize("source", MODULES.values(), ids=MODULES.keys())
def test_modules_by_construction(source):
    model, module = model_of(source)
    target = [n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id == "m"][-1]
    assert model.value(target).kind is Kind.MODULE


def test_a_class_named_like_a_model_is_not_a_module():
    assert value_at("class Model:\n    pass\nm = Model()\n", 3).kind is not Kind.MODULE


def test_constructing_a_module_is_not_a_forward_pass():
    model, module = model_of("""
        import torch.nn as nn
        class ModelForTest(nn.Module):
            def forward(self, x):
                return x
        def test_infer_shapes():
            model = ModelForTest()
            model.eval()
    """)
    assert not model.is_forward_call(node_at(module, 7))


def test_an_imported_class_used_as_a_module_is_one():
    model, module = model_of("""
        from mynets import MyNet
        def run(x):
            net = MyNet().cuda()
            return net(x)
    """)
    assert model.is_forward_call(node_at(module, 5))


def test_attribute_assigned_a_module_in_init_is_a_module_whatever_its_name():
    model, module = model_of("""
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.shared = nn.Linear(4, 4)
            def forward(self, x):
                return self.shared(x)
    """)
    assert model.is_forward_call(node_at(module, 8))


def test_parameter_annotated_as_module():
    model, module = model_of("import torch.nn as nn\ndef f(m: nn.Module, x):\n    return m(x)\n")
    assert model.is_forward_call(node_at(module, 3))


def test_parameter_typed_by_the_file_s_call_sites():
    model, module = model_of("""
        import torch.nn as nn
        def evaluate(m, xs):
            return [m(x) for x in xs]
        evaluate(nn.Linear(2, 2), [])
    """)
    assert model.is_forward_call(node_at(module, 4))


def test_parameter_named_model_without_evidence_is_unknown():
    model, module = model_of("def f(model, x):\n    return model(x)\n")
    assert not model.is_forward_call(node_at(module, 2))


def test_used_as_module_by_its_methods():
    model, module = model_of("def f(model, x):\n    model.eval()\n    return model(x)\n")
    assert model.is_forward_call(node_at(module, 3))


# -- tensors, graphs, devices, containers ------------------------------------------------------
HEAD = "import torch\nimport torch.nn as nn\nnet = nn.Linear(4, 4).cuda()\n"


@pytest.mark.parametrize(("expr", "graph"), [
    ("net(x)", Tri.YES),
    ("net(x).sum()", Tri.YES),
    ("net(x).item()", Tri.NO),
    ("net(x).detach()", Tri.NO),
    ("float(net(x).sum())", Tri.NO),
    ("net(x).argmax(-1)", Tri.NO),
    ("(net(x) > 0).sum()", Tri.NO),
    ("net(x).long()", Tri.NO),
    ("net(x).to(torch.int64)", Tri.NO),
    ("net(x).sign()", Tri.YES),  # derivative zero, graph kept
    ("net(x).round()", Tri.YES),
    ("net(x).type(torch.float16)", Tri.YES),
    ("torch.unique(net(x))", Tri.YES),
])
def test_graph_through_operations(expr, graph):
    assert value_at(HEAD + f"y = {expr}\n", 4).graph is graph


def test_no_grad_and_enable_grad_blocks():
    source = HEAD + "with torch.no_grad():\n    a = net(x)\n    with torch.enable_grad():\n        b = net(x)\n"
    assert value_at(source, 5).graph is Tri.NO
    assert value_at(source, 7).graph is Tri.YES


def test_a_function_only_grad_disabled_callers_reach_runs_grad_disabled():
    model, module = model_of(HEAD + """
def model_predictions(x):
    return net(x)
@torch.no_grad()
def sample(x):
    return model_predictions(x)
with torch.no_grad():
    model_predictions(1)
""")
    assert model.grad_disabled(node_at(module, 6))


def test_device_follows_moves():
    assert value_at(HEAD + "y = net(x).cpu()\n", 4).device is Tri.NO
    assert value_at(HEAD + "y = torch.zeros(3, device='cuda')\n", 4).device is Tri.YES
    assert value_at(HEAD + "y = torch.zeros(3)\n", 4).device is Tri.NO


CONSTRUCTED = "import torch\nimport torch.nn as nn\nclass Net(nn.Module):\n    pass\n"


@pytest.mark.parametrize(("code", "device"), [
    ("m = Net()", Tri.NO),
    ("m = nn.Linear(2, 2)", Tri.NO),
    ("m = nn.Linear(2, 2, device='cuda')", Tri.YES),
    ("m = Net().cuda()", Tri.YES),
    ("m = nn.Sequential(Net(), nn.ReLU())", Tri.NO),
    ("m = nn.Sequential(Net().cuda(), nn.ReLU())", Tri.MAYBE),
    ("m = nn.DataParallel(Net())", Tri.MAYBE),
    ("with torch.device('cuda'):\n    m = Net()", Tri.MAYBE),
    ("with fabric.init_module():\n    m = Net()", Tri.MAYBE),
    ("torch.set_default_device('cuda')\nm = Net()", Tri.MAYBE),
])
def test_a_constructed_module_is_on_the_cpu_unless_the_code_says_otherwise(code, device):
    model, module = model_of(CONSTRUCTED + code + "\n")
    target = [n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id == "m"][-1]
    value = model.value(target)
    assert value.kind is Kind.MODULE and value.device is device


def test_a_module_class_without_the_method_uses_nn_module_s():
    value = value_at(CONSTRUCTED + "sd = Net().cuda().state_dict()\n", 5)
    assert value.kind is Kind.CONTAINER and value.device is Tri.YES and value.graph is Tri.NO


@pytest.mark.parametrize(("source", "node_line", "expected"), [
    ("import torch\ndef f():\n    return torch.load('a')\n", 2, False),
    ("import torch\ndef f():\n    return torch.load('a').cuda()\n", 2, True),
    ("import torch\ndef f(device='cuda:1'):\n    return 1\n", 2, True),
    ("import pytest\n@pytest.mark.skipif(not torch.cuda.is_available(), reason='')\ndef f():\n    return 1\n", 3, True),
    ("from lightning import Trainer\ndef f():\n    Trainer(accelerator='gpu')\n", 2, True),
    ("from lightning import Trainer\ndef f():\n    Trainer(accelerator='cpu')\n", 2, False),
    ("from accelerate import Accelerator\ndef f():\n    Accelerator()\n", 2, True),
])
def test_uses_accelerator_reads_the_code_of_the_function(source, node_line, expected):
    model, module = model_of(source)
    function = node_at(module, node_line, ast.FunctionDef)
    assert model.uses_accelerator(function) is expected


@pytest.mark.parametrize(("expr", "kind"), [
    ("net(x).split(2)", Kind.CONTAINER),
    ("torch.unbind(net(x))", Kind.CONTAINER),
    ("nn.LSTM(4, 4)(x)", Kind.CONTAINER),
    ("net(x)", Kind.TENSOR),
])
def test_tensor_or_container(expr, kind):
    assert value_at(HEAD + f"y = {expr}\n", 4).kind is kind


def test_model_output_of_a_transformers_model_is_a_container_with_tensor_fields():
    source = ("from transformers import AutoModel\nm = AutoModel.from_pretrained('x')\n"
              "out = m(**batch)\nloss = out.loss\n")
    assert value_at(source, 3).kind is Kind.CONTAINER
    assert value_at(source, 4, ast.Attribute).kind is Kind.TENSOR


# -- framework hooks and repetition --------------------------------------------------------------
def test_lightning_evaluation_hooks_run_grad_disabled_and_per_batch():
    model, module = model_of("""
        import lightning as L
        class Lit(L.LightningModule):
            def validation_step(self, batch, idx):
                return self.net(batch)
            def training_step(self, batch, idx):
                return self.net(batch)
    """)
    validation, training = [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef)]
    assert model.grad_disabled(node_at(module, 5))
    assert not model.grad_disabled(node_at(module, 7))
    assert model.repetition(training).reason == "hook"


def test_optuna_objective_and_closure_are_repeated():
    model, module = model_of("""
        import optuna, torch
        def objective(trial):
            return 0.0
        study = optuna.create_study()
        study.optimize(objective, n_trials=10)
        def closure():
            return 0.0
        opt = torch.optim.LBFGS([torch.zeros(1, requires_grad=True)])
        opt.step(closure)
    """)
    objective, closure = [n for n in ast.walk(module) if isinstance(n, ast.FunctionDef)]
    assert model.repetition(objective).reason == "driver"
    assert model.repetition(closure).reason == "driver"


def test_function_called_from_a_training_loop_repeats():
    model, module = model_of("""
        def step(batch):
            return batch
        def fit(loader, model, opt):
            for b in loader:
                model(step(b)).sum().backward()
                opt.step()
    """)
    step = next(n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name == "step")
    assert model.repetition(step).per_batch


# -- in-file summaries ------------------------------------------------------------------------------
def test_a_call_is_judged_by_what_its_callee_does():
    model, module = model_of(HEAD + """
class AverageMeter:
    def __init__(self):
        self.sum = 0
    def update(self, val):
        self.sum += val
meter = AverageMeter()
meter.update(net(x).sum())
meter.update(net(x).sum().item())
""")
    attached = [e for e in model.call_effects(node_at(module, 11)) if e.kind == "accumulate"]
    detached = [e for e in model.call_effects(node_at(module, 12)) if e.kind == "accumulate"]
    assert attached and attached[0].value.attached and attached[0].target == "self.sum"
    assert detached and not detached[0].value.attached


def test_dict_of_lists_history_is_a_collection_into_self():
    model, module = model_of(HEAD + """
class History:
    def add(self, key, v):
        self.history[key].append(v)
h = History()
h.add("loss", net(x))
""")
    [effect] = model.call_effects(node_at(module, 9))
    assert effect.kind == "collect" and effect.target == "self.history" and effect.value.attached


# -- scopes ------------------------------------------------------------------------------------------------
def test_a_parameter_named_torch_is_not_torch():
    model, module = model_of("import torch; torch.cuda.init()\ndef f(torch, p):\n    return torch.load(p)\ng = torch.load\n")
    assert model.qualified(node_at(module, 3).func) is None
    assert model.qualified(node_at(module, 4, ast.Attribute)) == "torch.load"


def test_two_classes_forward_methods_are_different_functions():
    model, module = model_of("""
        import torch.nn as nn
        class A(nn.Module):
            def forward(self, x):
                return x.detach()
        class B(nn.Module):
            def forward(self, x):
                return x * 2
        y = B()(nn.Linear(2, 2)(x))
        z = A()(nn.Linear(2, 2)(x))
    """)
    assert model.value(node_at(module, 9)).graph is Tri.YES
    assert model.value(node_at(module, 10)).graph is Tri.NO


def test_gates_read_imports_not_text():
    from memlint.lint.facts import CodeFacts
    from memlint.lint.walk import NodeIndex

    tf_only = CodeFacts.of(NodeIndex(ast.parse("import tensorflow as tf\n'''import torch'''\n")))
    torch_file = CodeFacts.of(NodeIndex(ast.parse("import torch\n")))
    plain = CodeFacts.of(NodeIndex(ast.parse("x = 1\n")))
    assert not tf_only.is_framework_code("torch") and tf_only.is_framework_code("tensorflow")
    assert torch_file.is_framework_code("torch") and not torch_file.is_framework_code("tensorflow")
    assert plain.is_framework_code("torch") and not plain.is_framework_code("tensorflow")


# -- facts added from findings on real code --------------------------------------------------
def test_a_loop_freezing_every_parameter_freezes_the_module():
    source = ("import torch\nmodel = build()\nfor p in model.parameters():\n    p.requires_grad = False\n"
              "model.eval()\ny = model(x)\n")
    model, module = model_of(source)
    target = [n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id == "model"][-1]
    assert model.value(target).frozen


def test_a_loop_freezing_some_parameters_does_not():
    source = ("import torch\nmodel = build()\nfor n, p in model.named_parameters():\n    if 'head' not in n:\n"
              "        p.requires_grad = False\ny = model(x)\n")
    model, module = model_of(source)
    target = [n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id == "model"][-1]
    assert not model.value(target).frozen


def test_a_module_default_argument_is_a_module():
    source = "import torch.nn as nn\ndef evaluate(m, x, y, crit=nn.CrossEntropyLoss()):\n    return crit(m(x), y)\n"
    assert value_at(source, 3, ast.Name).kind is Kind.MODULE or value_at(source, 3).graph is not Tri.NO
    model, module = model_of(source)
    crit = [n for n in ast.walk(module) if isinstance(n, ast.Name) and n.id == "crit" and isinstance(n.ctx, ast.Load)][0]
    assert model.value(crit).kind is Kind.MODULE


def test_keyword_arguments_gather_into_the_kwargs_parameter():
    source = """
        import torch
        class Buffer:
            def __init__(self):
                self.items = []
            def add(self, **transition):
                self.items.append(transition)
        def collect(net, buffer, x):
            q = net(x)
            q.sum().backward()
            buffer.add(obs=x, q=q)
        """
    model, module = model_of(source)
    call = node_at(module, 11)
    effects = model.call_effects(call)
    assert effects and any(e.value.graph is Tri.YES for e in effects)


def test_a_library_method_name_is_not_taken_for_the_file_s_method_without_matching_keywords():
    source = """
        class Seen:
            def add(self, item):
                self.items.append(item)
        def f(net, x, seen):
            seen.add(net(x))
        """
    model, module = model_of(source)
    assert model.call_effects(node_at(module, 6)) == ()


def test_an_engine_built_here_differentiates_its_argument():
    source = "from accelerate import Accelerator\ndef f(model, batch):\n    accelerator = Accelerator()\n    loss = model(batch)\n    accelerator.backward(loss)\n"
    model, module = model_of(source)
    differentiated = model.differentiated(node_at(module, 5))
    assert isinstance(differentiated, ast.Name) and differentiated.id == "loss"


def test_a_training_step_without_callers_repeats():
    source = "def step(model, opt, x):\n    opt.zero_grad()\n    model(x).sum().backward()\n    opt.step()\n"
    model, module = model_of(source)
    repetition = model.repetition(node_at(module, 1, ast.FunctionDef))
    assert repetition is not None and repetition.reason == "step"


def test_micro_batches_of_one_step_do_not_carry_a_list_across_steps():
    source = """
        def train(model, opt, loader):
            for step in range(100):
                chunks = [next(loader) for _ in range(4)]
                losses = []
                for b in chunks:
                    loss = model(b)
                    loss.backward()
                    losses.append(loss.detach())
                opt.step()
        """
    model, module = model_of(source)
    assert model.carried_loop("losses", node_at(module, 9)) is None


def test_callers_beyond_the_context_depth_leave_grad_unknown_not_enabled():
    source = """
        import torch
        @torch.no_grad()
        def top(m, x):
            return middle(m, x)
        def middle(m, x):
            return inner(m, x)
        def inner(m, x):
            return m.eval()(x)
        """
    model, module = model_of(source)
    inner = node_at(module, 8, ast.FunctionDef)
    assert model.context_of(inner).grad is not Tri.YES


def test_deepspeed_initialize_returns_an_engine_module_on_the_device_and_an_optimizer():
    source = ("import deepspeed\nimport torch\n"
              "engine, optimizer, _, _ = deepspeed.initialize(model=torch.nn.Linear(2, 2), config={})\n"
              "engine\noptimizer\n")
    model, module = model_of(source)
    engine = model.value(node_at(module, 4, ast.Name))
    optimizer = model.value(node_at(module, 5, ast.Name))
    assert engine.kind is Kind.MODULE and engine.device is Tri.YES
    assert optimizer.kind is Kind.OPTIMIZER


def test_getattr_of_torch_picks_a_device_module():
    source = ("import torch\ndef f(device):\n    backend = getattr(torch, device, torch.cuda)\n"
              "    flush = backend.empty_cache\n    named = getattr(torch, 'xpu')\n")
    model, module = model_of(source)
    assert model.value(node_at(module, 3)).type_name == "torch.accelerator"
    assert model.value(node_at(module, 4, ast.Attribute)).type_name == "torch.accelerator.empty_cache"
    assert model.value(node_at(module, 5)).type_name == "torch.xpu"


def test_a_legacy_tensor_type_is_a_constructor_not_a_module():
    source = ("import torch\ncuda = True if torch.cuda.is_available() else False\n"
              "Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor\n"
              "def step(gen, opt):\n    z = Tensor(4, 2)\n    loss = gen(z).sum()\n    loss.backward()\n    opt.step()\n")
    model, module = model_of(source)
    z_call, gen_call = node_at(module, 5), node_at(module, 6).func.value
    assert not model.is_forward_call(z_call)
    assert model.is_forward_call(gen_call)


def test_an_engine_gather_keeps_the_device_of_what_it_gathers():
    source = ("import torch\nfrom accelerate import Accelerator\nacc = Accelerator()\n"
              "x = torch.zeros(2, device='cuda')\ny = acc.gather_for_metrics(x)\n")
    assert value_at(source, 5).device is Tri.YES


# -- TensorFlow / Keras facts (frameworks.py) ----------------------------------------------
def test_keras_callback_model_attribute_is_a_keras_model():
    source = (
        "from tensorflow import keras\nclass Probe(keras.callbacks.Callback):\n"
        "    def on_epoch_end(self, epoch, logs=None):\n        self.model.predict(x)\n"
    )
    model, module = model_of(source)
    value = model.value(node_at(module, 4).func.value)
    assert value.kind is Kind.MODULE and value.framework == "keras"


def test_a_callback_attribute_named_model_that_the_class_assigns_is_what_it_assigns():
    source = (
        "from tensorflow import keras\nimport torch.nn as nn\nclass Probe(keras.callbacks.Callback):\n"
        "    def __init__(self):\n        self.model = nn.Linear(2, 2)\n"
        "    def on_epoch_end(self, epoch, logs=None):\n        self.model.predict(x)\n"
    )
    model, module = model_of(source)
    assert model.value(node_at(module, 7).func.value).framework == "torch"


@pytest.mark.parametrize("call", ["keras.models.clone_model(m)", "tf.keras.models.model_from_json(s)", "keras.models.load_model('p')"])
def test_keras_model_builders(call):
    value = value_at(f"import tensorflow as tf\nimport keras\nm = {call}\n", 3)
    assert value.kind is Kind.MODULE and value.framework == "keras"


def test_tf_function_values_say_whether_they_have_a_signature():
    source = "import tensorflow as tf\nf = tf.function(step)\ng = tf.function(step, input_signature=[spec])\nh = tf.function(step, [spec])\n"
    model, module = model_of(source)
    assert [model.value(node_at(module, line)).type_name for line in (2, 3, 4)] == [
        "tensorflow.function", "tensorflow.function[input_signature]", "tensorflow.function[input_signature]"]
    assert model.value(node_at(module, 2)).kind is Kind.FUNCTION


def test_tf_function_decorator_any_spelling():
    source = (
        "import tensorflow as tf\nfrom tensorflow import function as tff\n@tf.function\ndef a(x):\n    return x\n"
        "@tff(reduce_retracing=True)\ndef b(x):\n    return x\n@other.function\ndef c(x):\n    return x\n"
    )
    model, module = model_of(source)
    functions = {f.name: f for f in ast.walk(module) if isinstance(f, ast.FunctionDef)}
    assert model.tf_function(functions["a"]) is not None
    assert isinstance(model.tf_function(functions["b"]), ast.Call)
    assert model.tf_function(functions["c"]) is None


def test_sessions_and_tapes_are_objects_of_their_type():
    source = "import tensorflow as tf\nwith tf.compat.v1.Session() as sess:\n    sess.run(op)\ntape = tf.GradientTape(persistent=True)\n"
    model, module = model_of(source)
    assert model.value(node_at(module, 3).func.value).type_name == "tensorflow.Session"
    assert model.value(node_at(module, 4)).type_name == "tensorflow.GradientTape"


def test_the_default_session_is_a_session():
    value = value_at("import tensorflow as tf\ns = tf.compat.v1.get_default_session()\n", 2)
    assert value.type_name == "tensorflow.Session"


def test_repeating_loops_leave_out_literal_loops():
    source = "for a in (1, 2):\n    for b in range(3):\n        for c in files:\n            while busy:\n                f(a, b, c)\n"
    model, module = model_of(source)
    loops = model.repeating_loops(node_at(module, 5))
    assert [type(loop).__name__ for loop in loops] == ["While", "For"]
    assert loops[1].lineno == 3


def test_arithmetic_on_python_numbers_is_a_python_number():
    source = "i = 0\nwhile busy:\n    i += 1\n    f(i * 2, i + t)\n"
    model, module = model_of(source)
    call = node_at(module, 4)
    assert model.value(call.args[0]).kind is Kind.PLAIN
    assert model.value(call.args[1]).kind is not Kind.PLAIN  # `t` is unknown: it may be a tensor


# -- size of values -----------------------------------------------------------------------
def _nesting(value) -> int:
    """How many levels of element/items ``value`` holds."""
    inner = [v for v in (value.element, *(value.items or ())) if v is not None]
    return 1 + max((_nesting(v) for v in inner), default=0)


def test_values_nest_at_most_max_depth():
    """`t = (t, t)` in a loop doubled the abstract value per statement (and
    the time to compare it: a file of 16 such lines took 48 s); containers
    keep MAX_DEPTH levels, with the graph of all they hold."""
    from memlint.lint.semantic.values import MAX_DEPTH

    pairs = "\n".join("    t = (t, t)" for _ in range(30))
    source = f"import torch\nmodel = torch.nn.Linear(2, 2)\nt = None\nfor x in range(10):\n    t = model(x)\n{pairs}\n    print(t)\n"
    model, module = model_of(source)
    printed = node_at(module, 36, ast.Call).args[0]
    value = model.value(printed)
    assert value.kind is Kind.CONTAINER and value.graph is Tri.YES
    assert _nesting(value) <= MAX_DEPTH + 1


def test_defaults_annotations_and_decorators_resolve_in_the_enclosing_scope():
    """Python evaluates a function's defaults, annotations and decorators
    where the function is defined, not in its own scope: a parameter
    named `torch` does not hide the module in its own default."""
    source = (
        "import torch\n"
        "def f(torch=None, state=torch.load('a.pt')) -> torch.Tensor:\n"
        "    return torch\n"
        "def g():\n"
        "    torch = object()\n"
        "    def h(x=torch.load('b.pt')):\n"
        "        return x\n"
        "    return h\n"
    )
    model, module = model_of(source)
    default_f = node_at(module, 2, ast.Call).func
    annotation = module.body[1].returns
    default_h = node_at(module, 6, ast.Call).func
    assert model.qualified(default_f) == "torch.load"
    assert model.qualified(annotation) == "torch.Tensor"
    assert model.qualified(default_h) is None  # g's local `torch`


def test_global_nonlocal_and_comprehension_walrus_bind_where_python_binds():
    """A store to a `global` name binds in the module, to a `nonlocal` one
    in the enclosing function, and an assignment expression in a
    comprehension in the enclosing scope (PEP 572): each rebinds the
    alias `load = torch.load`, which is then no alias."""
    rebinders = {
        "global": "def reset():\n    global load\n    load = print\n",
        "walrus": "names = [(load := print) for _ in range(2)]\n",
    }
    for how, rebinding in rebinders.items():
        source = f"import torch\nload = torch.load\n{rebinding}state = load('a.pt')\n"
        model, module = model_of(source)
        call = [n for n in ast.walk(module) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "load"][-1]
        assert model.qualified(call.func) is None, how
    model, module = model_of("import torch\nload = torch.load\nstate = load('a.pt')\n")
    assert model.qualified(node_at(module, 3).func) == "torch.load"
    source = "import torch\ndef outer():\n    load = torch.load\n    def inner():\n        nonlocal load\n        load = print\n    inner()\n    return load('a.pt')\n"
    model, module = model_of(source)
    assert model.qualified(node_at(module, 8).func) is None
