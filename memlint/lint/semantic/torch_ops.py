"""Facts about PyTorch operations the semantic model needs, as data.

Differentiability: an op keeps the autograd graph when it has a derivative
formula, even one that is zero almost everywhere (``sign``, ``round``,
``floor``, ``torch.unique`` on floats); only ops without one — comparisons,
index-valued ops, integer and bool results — return tensors that do not
require grad. Source: ``tools/autograd/derivatives.yaml`` of PyTorch 2.13
(the ops listed below have no entry, or are marked
``output_differentiability: [False]``), checked against the installed torch
by ``tests/lint/test_torch_facts.py``, which calls each op on a tensor that
requires grad and compares ``requires_grad`` of the result.

Nothing here imports torch: linting never does.
"""

from __future__ import annotations

#: ``torch.<name>`` functions and ``Tensor.<name>`` methods whose (first)
#: result never requires grad.
NONDIFFERENTIABLE = frozenset({
    "argmax", "argmin", "argsort", "argwhere", "nonzero", "count_nonzero",
    "eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal",
    "isnan", "isinf", "isfinite", "isclose", "isreal", "isneginf", "isposinf", "signbit",
    "logical_and", "logical_or", "logical_not", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    "bucketize", "searchsorted", "histc", "unravel_index",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
    "randint", "randperm", "multinomial",
})
#: Sampling ops NOT in :data:`NONDIFFERENTIABLE` although their result is random draws:
#: ``bernoulli`` and ``poisson`` have a (zero) derivative formula in torch 2.13.0
#: ``tools/autograd/derivatives.yaml`` (``bernoulli(Tensor self)``: ``self: zeros_like(grad)``;
#: ``poisson``: ``self: zeros_like(self)``), so ``torch.bernoulli(probs)`` of an attached
#: ``probs`` requires grad and its ``BernoulliBackward0`` keeps ``probs``' graph alive.
#: ``multinomial`` returns indices (int64): no graph.
ZERO_DERIVATIVE_SAMPLERS = frozenset({"bernoulli", "poisson"})
#: Ops that return a Python value (bool, int, torch.Size), not a tensor.
PYTHON_RESULT = frozenset({
    "equal", "allclose", "numel", "dim", "ndimension", "nelement", "element_size", "size", "stride",
    "storage_offset", "data_ptr", "get_device", "is_contiguous", "is_floating_point", "is_complex",
    "is_nonzero", "is_tensor", "is_storage", "item", "tolist", "is_pinned", "is_shared",
})
#: Ops returning a tuple of tensors whose first element keeps the graph and
#: whose others are indices (``values, indices = x.max(dim)``).
VALUES_AND_INDICES = frozenset({"sort", "topk", "kthvalue", "mode", "cummax", "cummin", "median", "nanmedian", "max", "min", "aminmax",
                                "frexp"})
#: Field names of the named tuples (``torch.return_types.<op>``) the ops of
#: :data:`VALUES_AND_INDICES` return, in order (``x.median(-1).values``);
#: read from torch 2.13.0 ``torch/return_types.py`` (the structseq types
#: generated from ``aten/src/ATen/native/native_functions.yaml``), checked
#: against the installed torch by ``tests/lint/test_recall_family3_A.py``.
#: ``frexp`` returns ``(mantissa, exponent)``, the exponent an int32 tensor (torch 2.13.0
#: derivatives.yaml ``frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent)``: only
#: ``self`` has a formula, through the mantissa).
RETURN_TYPE_FIELDS = ({op: ("values", "indices") for op in VALUES_AND_INDICES - {"aminmax", "frexp"}}
                      | {"aminmax": ("min", "max"), "frexp": ("mantissa", "exponent")})
#: Ops of :data:`VALUES_AND_INDICES` whose every field keeps the graph (no index field).
ALL_FIELDS_DIFFERENTIABLE = frozenset({"aminmax"})
#: The type name the semantic model gives a named tuple result of an op (``torch.return_types.max``).
RETURN_TYPES_PREFIX = "torch.return_types."
#: Ops returning a tuple (or list) of tensors, all keeping the graph.
TUPLE_RESULT = frozenset({
    "split", "chunk", "unbind", "tensor_split", "hsplit", "vsplit", "dsplit", "split_with_sizes",
    "meshgrid", "broadcast_tensors", "std_mean", "var_mean",
    "histogram", "lu", "qr", "svd", "eig", "slogdet", "atleast_1d", "atleast_2d", "atleast_3d",
})
#: Ops of :data:`VALUES_AND_INDICES` that return a tuple only when a ``dim`` is given
#: (``x.max()`` is one tensor, ``x.max(1)`` a ``(values, indices)`` pair).
TUPLE_ONLY_WITH_DIM = frozenset({"max", "min", "median", "nanmedian"})

#: dtype names whose tensors cannot require grad (integer, bool): casting to
#: them cuts the graph (``x.long()``, ``x.to(torch.int64)``, ``x.type(torch.LongTensor)``).
INTEGER_DTYPES = frozenset({
    "long", "int", "short", "char", "byte", "bool", "int64", "int32", "int16", "int8", "uint8",
    "uint16", "uint32", "uint64", "LongTensor", "IntTensor", "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor",
})
#: ``Tensor`` methods that cast to one of :data:`INTEGER_DTYPES`.
INTEGER_CAST_METHODS = frozenset({"long", "int", "short", "char", "byte", "bool"})
#: ``Tensor`` methods that move or cast without cutting the graph.
FLOAT_CAST_METHODS = frozenset({"float", "double", "half", "bfloat16", "cfloat", "cdouble"})

#: Methods that cut the graph and what they return: "tensor" (a detached
#: tensor on the same device), "plain" (a Python value), "host" (numpy, host memory).
DETACHING_METHODS = {"detach": "tensor", "detach_": "tensor", "item": "plain", "tolist": "plain", "numpy": "host"}
#: Tensor attributes that are not tensors (metadata).
METADATA_ATTRIBUTES = frozenset({
    "shape", "dtype", "device", "ndim", "is_cuda", "is_leaf", "requires_grad", "grad_fn", "layout",
    "is_sparse", "is_quantized", "is_meta", "names", "itemsize", "nbytes",
})
#: Tensor attributes that are the same tensor's data without its history.
DETACHED_ATTRIBUTES = frozenset({"data", "grad"})
#: Indexing a 0-dim tensor (a loss, a full reduction) with an integer never
#: gives a tensor: torch >= 0.4 raises "invalid index of a 0-dim tensor. Use
#: `tensor.item()` in Python ..." (torch 2.13.0 ``include/ATen/TensorIndexing.h`` ``applySelect``:
#: ``TORCH_CHECK_INDEX`` on a 0-dim ``self``, then the size check for any other index), and torch <= 0.3, where a loss was
#: a one-element tensor of a Variable, gave a Python number for ``loss.data[0]``.
ZERO_DIM_INTEGER_INDEX_IS_NO_TENSOR = True
#: Methods that exist on tensors and not on Python containers: called on a
#: value of unknown kind, they say it is a tensor.
TENSOR_ONLY_METHODS = frozenset({
    "backward", "detach", "detach_", "item", "numpy", "view", "view_as", "reshape", "flatten",
    "squeeze", "unsqueeze", "permute", "transpose", "contiguous", "long",
    "sum", "mean", "norm", "pow", "exp", "log", "softmax", "log_softmax", "argmax", "argmin", "size", "dim",
    "numel", "clone", "masked_fill", "gather", "expand", "expand_as", "repeat", "abs", "sqrt", "clamp",
    "matmul", "mm", "bmm", "type_as", "new_zeros", "new_ones", "new_tensor", "new_full", "new_empty", "zero_",
    "fill_", "add_", "mul_", "sub_", "div_", "retain_grad", "register_hook", "std", "var",
    "max", "min", "amax", "amin", "prod", "sigmoid", "tanh", "relu", "t", "narrow", "unfold", "nonzero",
    "share_memory_",
})

#: Methods both tensors and modules have: on a value of unknown kind they
#: move or cast it and say nothing of its kind.
SHARED_TENSOR_MODULE_METHODS = frozenset({"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "type", "requires_grad_"})
#: In-place tensor methods that write their tensor arguments' values into the
#: receiver and return it (torch 2.13.0 ``torch/_tensor_docs.py``: ``add_``,
#: ``sub_``, ``mul_``, ``div_``, ``copy_``, ``lerp_``, ``addcmul_``, ``addcdiv_``).
#: Given an argument with a graph, the receiver records the op and keeps that
#: graph (docs/source/notes/autograd.rst, "In-place operations with autograd"):
#: a buffer updated so on every call chains every call's graph.
IN_PLACE_WRITES = frozenset({"add_", "sub_", "mul_", "div_", "copy_", "lerp_", "addcmul_", "addcdiv_"})
#: Of those, the moves that change a module in place and return it but give
#: a tensor's copy (torch 2.13.0 ``torch/nn/modules/module.py`` ``Module.to``,
#: ``cuda``, ``cpu``, ``half``, ``float``, ``double``, ``bfloat16``;
#: ``torch/_tensor_docs.py``: ``Tensor.to`` "returns a Tensor").
IN_PLACE_MODULE_MOVES = frozenset({"to", "cuda", "cpu", "half", "float", "double", "bfloat16"})

#: Reductions that leave a one-element tensor when called without a ``dim``.
FULL_REDUCTIONS = frozenset({"mean", "sum", "max", "min", "norm", "prod", "std", "var", "amax", "amin", "logsumexp", "nansum", "nanmean", "all", "any"})

#: ``torch.<name>`` factories: new tensors with no history (unless ``requires_grad=True``).
FACTORIES = frozenset({
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "tensor", "as_tensor",
    "from_numpy", "arange", "linspace", "logspace", "eye", "empty_strided", "normal", "frombuffer",
    "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like", "randint_like",
    "Tensor", "FloatTensor", "LongTensor", "IntTensor", "BoolTensor", "ByteTensor", "HalfTensor", "DoubleTensor",
})
#: Loss functions in ``torch.nn.functional`` (their result is attached when an input is).
FUNCTIONAL_LOSSES = frozenset({
    "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
    "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cosine_embedding_loss", "ctc_loss",
    "margin_ranking_loss", "hinge_embedding_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss",
    "multi_margin_loss", "soft_margin_loss", "triplet_margin_loss", "triplet_margin_with_distance_loss",
    "poisson_nll_loss", "gaussian_nll_loss",
})

#: ``torch.nn`` modules whose forward returns a tuple (torch 2.13,
#: ``torch/nn/modules/rnn.py``, ``activation.py``, ``adaptive.py``):
#: ``nn.LSTM`` returns ``(output, (h_n, c_n))``, ``nn.MultiheadAttention``
#: ``(attn_output, attn_weights)``; every other ``torch.nn`` module returns one tensor.
TUPLE_OUTPUT_MODULES = frozenset({"RNN", "LSTM", "GRU", "LSTMCell", "MultiheadAttention", "AdaptiveLogSoftmaxWithLoss"})
#: ``torch.nn`` layers whose forward saves for backward nothing but its input and its
#: own parameters (tensors that live anyway while the caller holds them): measured on
#: torch 2.13.0+cpu with ``torch.autograd.graph.saved_tensors_hooks`` around one forward
#: of each (1-3d, with and without bias, strided and padded; an unbatched conv input
#: too), every saved tensor shares its storage with the input or a parameter
#: (``tests/lint/test_heldout10_m104b.py`` re-checks it against the installed torch).
#: Not ``LSTM``/``GRU`` (gates and a workspace), ``LayerNorm``/``BatchNorm*`` (mean and
#: inverse std), nor any pooling that saves indices.
INPUT_SAVING_LAYERS = frozenset({
    "Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Embedding",
})
#: ``torch.nn`` containers: not layers themselves; indexing or iterating one gives modules.
MODULE_CONTAINERS = frozenset({"ModuleList", "ModuleDict", "Sequential", "ParameterList", "ParameterDict"})
#: ``nn.Module`` attributes that are dicts of the module's own submodules, by name
#: (torch 2.13.0 ``torch/nn/modules/module.py``: ``Module.__init__`` sets
#: ``self._modules: dict[str, Optional[Module]] = {}``, and ``add_module``/``register_module``
#: and assigning a module to an attribute store it there).
SUBMODULE_DICTS = frozenset({"_modules"})
#: ``torch.nn`` containers of parameters, and what iterating one yields (torch 2.13.0
#: ``torch/nn/modules/container.py``): indexing either with a key or an integer gives the
#: ``Parameter`` stored there (``ParameterList.__getitem__``/``ParameterDict.__getitem__``;
#: ``__setitem__`` of both wraps a plain tensor into a ``Parameter`` as it is stored, a
#: leaf that requires grad); iterating a ``ParameterList`` yields its parameters
#: (``__iter__``: ``self[i]`` for each index), iterating a ``ParameterDict`` its keys
#: (``__iter__``: ``iter(self._keys)``). Slicing a ``ParameterList`` gives a ``ParameterList``.
PARAMETER_CONTAINERS = {"torch.nn.ParameterList": "parameters", "torch.nn.modules.container.ParameterList": "parameters",
                        "torch.nn.ParameterDict": "keys", "torch.nn.modules.container.ParameterDict": "keys"}
#: Module methods that return the module itself (or a module), torch 2.13 ``torch/nn/modules/module.py``.
#: ``nn.Module`` has no ``mps`` method, and ``Module.compile`` returns None (it sets
#: ``self._compiled_call_impl`` in place): neither is here.
MODULE_RETURNING_METHODS = frozenset({
    "to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval", "requires_grad_", "apply",
    "share_memory", "xpu", "type", "to_empty",
})
#: Module methods that return its tensors without history (``state_dict`` detaches by default,
#: ``keep_vars=False``) or a Python value (``compile`` and ``zero_grad`` return None,
#: ``load_state_dict`` the missing/unexpected keys; transformers 5.24.0 ``modeling_utils.py``
#: ``num_parameters`` an int).
MODULE_DETACHED_METHODS = frozenset({"state_dict", "buffers", "named_buffers", "load_state_dict", "zero_grad", "extra_repr",
                                     "num_parameters", "compile"})
#: Module methods that return its parameters (leaves that require grad).
MODULE_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
#: Module methods whose results are the module's own storage, no new tensor and no graph
#: (torch 2.13.0 ``torch/nn/modules/module.py``): ``parameters``/``named_parameters`` and
#: ``buffers``/``named_buffers`` yield the registered ``Parameter``/buffer objects themselves
#: (``_named_members`` over ``_parameters``/``_buffers``), and ``state_dict`` stores
#: ``param.detach()``/``buf.detach()`` (``_save_to_state_dict`` with ``keep_vars=False``),
#: views that share the module's storage. Holding one keeps nothing the module does not hold.
MODULE_STORAGE_METHODS = frozenset({"parameters", "named_parameters", "buffers", "named_buffers", "state_dict"})
#: Module methods that return its submodules.
MODULE_CHILDREN_METHODS = frozenset({"modules", "named_modules", "children", "named_children", "get_submodule", "get_input_embeddings", "get_output_embeddings"})
#: The public methods ``nn.Module`` itself defines (torch 2.13 ``torch/nn/modules/module.py``),
#: ``forward`` aside: bookkeeping, moves and hooks. A model's other methods (``encode``,
#: ``decode``, ``sample``) are its own code, which runs its layers.
MODULE_OWN_METHODS = frozenset({
    "add_module", "apply", "bfloat16", "buffers", "children", "compile", "cpu", "cuda", "double", "eval",
    "extra_repr", "float", "get_buffer", "get_extra_state", "get_parameter", "get_submodule", "half", "ipu",
    "load_state_dict", "modules", "mtia", "named_buffers", "named_children", "named_modules", "named_parameters",
    "parameters", "register_backward_hook", "register_buffer", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook", "register_load_state_dict_post_hook",
    "register_load_state_dict_pre_hook", "register_module", "register_parameter", "register_state_dict_post_hook",
    "register_state_dict_pre_hook", "requires_grad_", "set_extra_state", "set_submodule", "share_memory",
    "state_dict", "to", "to_empty", "train", "type", "xpu", "zero_grad",
})
#: Methods only modules have (``nn.Module`` defines them, ``torch.Tensor`` does not; checked
#: against torch in tests/lint/test_torch_facts.py): calling one on an unknown value says it is a module.
#: ``nn.Module.train(mode)``/``eval()``: switch dropout and batch-norm behaviour. Other
#: libraries' objects have methods of these names too (gym/baselines ``VecNormalize.eval()``
#: stops updating observation statistics), so a switch alone does not tell a module.
MODULE_MODE_METHODS = frozenset({"train", "eval"})
MODULE_EVIDENCE_METHODS = frozenset({
    "parameters", "named_parameters", "state_dict", "load_state_dict", "modules", "named_modules", "children",
    "named_children", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_buffer", "get_submodule", "eval", "train",
})
#: Of those, the methods that optimizers, learning-rate schedulers and
#: ``GradScaler`` have too (torch 2.13.0 ``torch/optim/optimizer.py``
#: ``Optimizer.state_dict``/``load_state_dict``, ``torch/optim/lr_scheduler.py``
#: ``LRScheduler.state_dict``/``load_state_dict``, ``torch/amp/grad_scaler.py``):
#: they tell a module only of a value that is never stepped -- ``step()`` is
#: what those objects have and ``nn.Module`` has not (``torch/nn/modules/module.py``).
SHARED_STATE_METHODS = frozenset({"state_dict", "load_state_dict"})
STEPPED_OBJECT_METHOD = "step"

#: ``torch.distributions``: a distribution built from tensors keeps their graph
#: (its parameters are those tensors, or differentiable functions of them).
#: ``sample()`` runs under ``torch.no_grad()`` (torch 2.13.0
#: torch/distributions/distribution.py ``Distribution.sample``; the discrete
#: ones draw with ``torch.multinomial``/``torch.bernoulli``, categorical.py,
#: bernoulli.py) and ``enumerate_support()`` builds index values: no graph.
DISTRIBUTION_NAMESPACE = "torch.distributions."
DISTRIBUTION_SAMPLING_METHODS = frozenset({"sample", "sample_n", "enumerate_support"})
#: Methods computed from the parameters by differentiable ops (``log_prob``,
#: ``entropy``, ``rsample`` -- the reparameterised sample --, ``cdf``,
#: ``icdf``, ``perplexity``). Properties are left unknown: ``mode`` is an
#: ``argmax`` and ``mean``/``variance`` a NaN constant for the discrete ones.
DISTRIBUTION_DIFFERENTIABLE_METHODS = frozenset({"log_prob", "entropy", "rsample", "cdf", "icdf", "perplexity"})
