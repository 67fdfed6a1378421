"""Identifiers through which the semantic model can know of an autograd
graph, kept apart from the model so that the engine's pre-parse gate
(:mod:`memlint.lint.facts`) can use them without importing it.

The semantic model (:mod:`memlint.lint.semantic`) marks a value
graph-attached only when it comes from a module's forward pass (a module
by construction: ``torch.nn``, ``transformers``, ``timm``,
``torchvision.models``, ``from_pretrained``, a class deriving from one, or
a value used as a module: ``.parameters()``, ``.eval()``...), a tensor a
backward pass differentiates, a ``requires_grad`` tensor or a parameter.
A file none of whose identifiers names one of those ways cannot hold a
graph the model knows of; this set is that necessary condition.
"""

from __future__ import annotations

from memlint.lint.semantic.torch_ops import MODULE_EVIDENCE_METHODS

GRAPH_SOURCE_NAMES = frozenset({
    # modules by construction and the bases of module classes
    "nn", "transformers", "timm", "torchvision", "hub", "lightning", "pytorch_lightning", "peft", "diffusers",
    "deepspeed", "accelerate", "Module", "LightningModule", "PreTrainedModel", "from_pretrained", "from_config",
    "from_single_file", "create_model",
    # tensors that are or make a graph
    "checkpoint", "requires_grad", "requires_grad_", "Parameter", "backward", "manual_backward", "grad", "autograd",
    # framework hooks whose arguments are modules
    "compute_loss", "training_step", "prediction_step",
    # moves whose result, when called, is a module (operations._bound_from_move_and_called)
    "to", "cuda",
}) | MODULE_EVIDENCE_METHODS

#: Top-level packages of other array frameworks: a file importing one of
#: these and nothing of PyTorch's ecosystem is not PyTorch code.
FOREIGN_PACKAGES = frozenset({"tensorflow", "keras", "tf_keras", "jax", "flax", "paddle", "mindspore", "oneflow",
                              "mxnet", "jittor", "megengine", "chainer", "cupy", "mlx"})
