"""The differentiability table of memlint.lint.semantic.torch_ops, checked
against the installed torch: each op is called on a tensor that requires
grad and the result's ``requires_grad`` must be what the table says."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from memlint.lint.semantic import torch_ops  # noqa: E402

#: How to call the ops whose arguments are not one tensor.
_OTHER = lambda x: x.detach() + 0.5  # noqa: E731
CALLS = {
    "eq": lambda f, x: f(x, _OTHER(x)), "ne": lambda f, x: f(x, _OTHER(x)), "lt": lambda f, x: f(x, _OTHER(x)),
    "le": lambda f, x: f(x, _OTHER(x)), "gt": lambda f, x: f(x, _OTHER(x)), "ge": lambda f, x: f(x, _OTHER(x)),
    "greater": lambda f, x: f(x, _OTHER(x)), "greater_equal": lambda f, x: f(x, _OTHER(x)),
    "less": lambda f, x: f(x, _OTHER(x)), "less_equal": lambda f, x: f(x, _OTHER(x)), "not_equal": lambda f, x: f(x, _OTHER(x)),
    "isclose": lambda f, x: f(x, _OTHER(x)),
    "logical_and": lambda f, x: f(x, x), "logical_or": lambda f, x: f(x, x), "logical_xor": lambda f, x: f(x, x),
    "bucketize": lambda f, x: f(x, torch.tensor([0.0, 1.0])),
    "searchsorted": lambda f, x: f(torch.tensor([0.0, 1.0]), x),
    "full_like": lambda f, x: f(x, 2.0), "randint_like": lambda f, x: f(x, 5),
    "topk": lambda f, x: f(x, 2), "kthvalue": lambda f, x: f(x, 1), "cummax": lambda f, x: f(x, 0),
    "cummin": lambda f, x: f(x, 0), "mode": lambda f, x: f(x, 0), "max": lambda f, x: f(x, 0),
    "min": lambda f, x: f(x, 0), "median": lambda f, x: f(x, 0), "nanmedian": lambda f, x: f(x, 0),
    "split": lambda f, x: f(x, 1), "chunk": lambda f, x: f(x, 2), "tensor_split": lambda f, x: f(x, 2),
    "hsplit": lambda f, x: f(x, 1), "vsplit": lambda f, x: f(x, 2),
}
#: Ops of the table that need inputs of another dtype or shape, or have no float kernel.
NOT_CALLED = frozenset({
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "unravel_index", "randint", "randperm",
    "bernoulli", "multinomial", "poisson", "dsplit", "split_with_sizes", "meshgrid", "broadcast_tensors", "lu",
    "qr", "svd", "eig", "slogdet", "aminmax", "frexp", "histogram", "atleast_1d", "atleast_2d", "atleast_3d",
    "std_mean", "var_mean",
})


def _call(name: str):
    x = torch.randn(4, 3, requires_grad=True)
    function = getattr(torch, name, None) or getattr(torch.Tensor, name)
    return CALLS.get(name, lambda f, t: f(t))(function, x)


def _first(result):
    return result[0] if isinstance(result, (tuple, list)) else result


@pytest.mark.parametrize("name", sorted(torch_ops.NONDIFFERENTIABLE - NOT_CALLED))
def test_nondifferentiable_ops_return_no_graph(name):
    assert not _first(_call(name)).requires_grad


@pytest.mark.parametrize("name", sorted(torch_ops.VALUES_AND_INDICES - NOT_CALLED))
def test_values_keep_the_graph_and_indices_do_not(name):
    values, indices = _call(name)
    assert values.requires_grad and not indices.requires_grad


@pytest.mark.parametrize("name", sorted(torch_ops.TUPLE_RESULT - NOT_CALLED))
def test_tuple_results_keep_the_graph(name):
    result = _call(name)
    assert isinstance(result, (tuple, list)) and _first(result).requires_grad


@pytest.mark.parametrize("name", ["sign", "sgn", "round", "floor", "ceil", "trunc", "frac", "unique", "abs", "clamp"])
def test_zero_derivative_ops_keep_the_graph(name):
    """Ops with a derivative formula keep the graph even where the gradient is zero."""
    x = torch.randn(4, 3, requires_grad=True)
    result = getattr(torch, name)(x) if name != "clamp" else torch.clamp(x, 0, 1)
    assert name not in torch_ops.NONDIFFERENTIABLE and result.requires_grad


@pytest.mark.parametrize("method", sorted(torch_ops.INTEGER_CAST_METHODS))
def test_integer_casts_detach(method):
    assert not getattr(torch.randn(3, requires_grad=True), method)().requires_grad


@pytest.mark.parametrize("method", sorted(torch_ops.FLOAT_CAST_METHODS - {"cfloat", "cdouble"}))
def test_float_casts_keep_the_graph(method):
    assert getattr(torch.randn(3, requires_grad=True), method)().requires_grad


def test_enough_of_the_table_is_checked():
    assert len(torch_ops.NONDIFFERENTIABLE - NOT_CALLED) >= 30


@pytest.mark.parametrize("name", sorted(torch_ops.PYTHON_RESULT & {"equal", "allclose", "numel", "dim", "item", "tolist", "is_floating_point"}))
def test_python_results_are_not_tensors(name):
    x = torch.randn(1, requires_grad=True)  # one element: `.item()` needs it
    function = getattr(torch, name, None) or getattr(torch.Tensor, name)
    result = function(x, x) if name in ("equal", "allclose") else function(x)
    assert not isinstance(result, torch.Tensor)


def test_module_own_methods_are_those_nn_module_defines():
    """The table names exactly nn.Module's public methods (forward aside): a
    method outside it, called on a model, is the model's own code."""
    own = {name for name in dir(torch.nn.Module) if not name.startswith("_") and callable(getattr(torch.nn.Module, name))}
    assert torch_ops.MODULE_OWN_METHODS == own - {"forward"}


def test_module_evidence_methods_are_module_only():
    """A method that says "this value is a module" must be one ``nn.Module``
    defines and ``torch.Tensor`` does not (``requires_grad_`` is both)."""
    on_tensors = sorted(m for m in torch_ops.MODULE_EVIDENCE_METHODS if hasattr(torch.Tensor, m))
    not_on_modules = sorted(m for m in torch_ops.MODULE_EVIDENCE_METHODS if not hasattr(torch.nn.Module, m))
    assert on_tensors == [] and not_on_modules == []


def test_shared_state_methods_are_also_optimizers_and_schedulers_and_step_is_not_a_modules():
    """``state_dict``/``load_state_dict`` tell a module only of a value that is
    never stepped: optimizers, schedulers and GradScaler have them too, and
    ``step`` is theirs, not ``nn.Module``'s."""
    holders = (torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler, torch.amp.GradScaler)
    assert torch_ops.SHARED_STATE_METHODS <= torch_ops.MODULE_EVIDENCE_METHODS
    assert all(hasattr(holder, m) for holder in holders for m in torch_ops.SHARED_STATE_METHODS)
    assert all(hasattr(holder, torch_ops.STEPPED_OBJECT_METHOD) for holder in holders)
    assert not hasattr(torch.nn.Module, torch_ops.STEPPED_OBJECT_METHOD)


def test_in_place_writes_are_tensor_methods_that_return_their_receiver():
    t = torch.zeros(3)
    for name in torch_ops.IN_PLACE_WRITES:
        args = (torch.ones(3), torch.ones(3)) if name in ("addcmul_", "addcdiv_") else (torch.ones(3),) if name != "lerp_" else (torch.ones(3), 0.5)
        assert getattr(t, name)(*args) is t, name


def test_shared_methods_exist_on_both_tensors_and_modules():
    """The methods the model treats as either a tensor's or a module's exist on both."""
    missing = sorted(m for m in torch_ops.SHARED_TENSOR_MODULE_METHODS
                     if not (hasattr(torch.Tensor, m) and hasattr(torch.nn.Module, m)))
    assert missing == [], missing


def test_tensor_only_methods_are_not_module_methods():
    """A method that says "this value is a tensor" is a ``torch.Tensor`` method ``nn.Module`` lacks."""
    wrong = sorted(m for m in torch_ops.TENSOR_ONLY_METHODS
                   if hasattr(torch.nn.Module, m) or not hasattr(torch.Tensor, m))
    assert wrong == [], wrong
