"""Names the analysis recognises, kept apart from the dataflow analysis so
that the engine's pre-parse gate (:mod:`memlint.lint.facts`) can use them
without importing it.

The dataflow analysis (:mod:`memlint.lint.dataflow`) decides with these
patterns what is a model and which method calls are forward passes; the
gate uses the same patterns to decide whether a file contains anything the
analysis could treat as a source of an autograd graph.
"""

from __future__ import annotations

import re

#: Names of model-like objects (calling one is a forward pass); builder,
#: loader and setter helpers (``build_model``, ``load_model``...) are excluded.
MODEL_NAME = re.compile(
    r"^(?!_*(?:get|build|make|create|load|init|set|to|from|is|has|save|compute|prepare|configure|setup|resize|"
    r"tie|freeze|unfreeze|apply|register|num|n|use|with|wrap|unwrap)_)"
    r"(?:model|net|network|module|encoder|decoder|backbone|head|classifier|generator|discriminator|"
    r"critic|actor|policy|agent_net|cell|rnn|lstm|gru|transformer|unet|vae|autoencoder|criterion|"
    r"loss_fn|lossfn|loss_func|loss_function|loss_module|teacher|student|ema_model|ddp_model|"
    r"[a-z0-9_]*_(?:model|net|encoder|decoder|head|criterion|backbone|cell|lstm|rnn|gru)|"
    r"(?:model|net)_?[a-z0-9]*)$",
    re.IGNORECASE,
)
#: Methods of a model whose result is a forward pass's output.
FORWARD_METHODS = re.compile(
    r"^(?:forward|loss|compute_loss|compute_losses|get_loss|training_step|shared_step|step_fn|"
    r"predict_step|validation_step|test_step|forward_[a-z0-9_]+|[a-z0-9_]*_loss)$"
)
#: Identifiers through which the dataflow analysis can mark a value
#: graph-attached other than a model-like name (see the list in the
#: docstring of :mod:`memlint.lint.dataflow`): ``torch.nn`` modules and loss
#: functions, ``transformers`` models, ``torch.utils.checkpoint``,
#: ``requires_grad=True`` factories, and tensors ``.backward()`` is called on.
GRAPH_SOURCE_NAMES = frozenset({"nn", "transformers", "checkpoint", "requires_grad", "backward", "manual_backward"})
