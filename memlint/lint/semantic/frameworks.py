"""Framework facts, as data: which base classes make a module, which hooks a
framework calls once per batch, which of them run with autograd off, which
calls build models, optimizers and data streams.

Rules never consult this table directly; the semantic model does, and rules
ask the model. Every entry names the file and version it was read from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# -- where each fact was read ------------------------------------------------------
LIGHTNING = "lightning 2.6.6"
TRANSFORMERS = "transformers 5.24.0"
ACCELERATE = "accelerate 1.15.0"
KERAS = "keras 3.15.1"
OPTUNA = "optuna 5.0.0"
TORCH = "torch 2.13.0"

# -- roles of classes ----------------------------------------------------------------
#: Base classes (qualified names, as imports resolve them) and the role a
#: class deriving from them has. A base not listed here but defined in the
#: same file passes its roles on.
BASE_ROLES: dict[str, frozenset[str]] = {}


def _roles(names: str, *roles: str) -> None:
    for name in names.split():
        BASE_ROLES[name] = BASE_ROLES.get(name, frozenset()) | frozenset(roles)


# torch/nn/modules/module.py (torch 2.13): every layer and model derives from nn.Module.
_roles("torch.nn.Module torch.nn.modules.module.Module torch.nn.Sequential torch.nn.ModuleList torch.nn.ModuleDict",
       "module", "torch")
# lightning/pytorch/core/module.py (lightning 2.6.6): LightningModule(nn.Module); older
# releases export it as pytorch_lightning.LightningModule.
_roles("lightning.LightningModule lightning.pytorch.LightningModule lightning.pytorch.core.LightningModule "
       "lightning.pytorch.core.module.LightningModule pytorch_lightning.LightningModule "
       "pytorch_lightning.core.LightningModule pytorch_lightning.core.lightning.LightningModule",
       "module", "torch", "lightning_module")
# lightning/pytorch/callbacks/callback.py: Callback hooks get (trainer, pl_module, ...).
_roles("lightning.Callback lightning.pytorch.Callback lightning.pytorch.callbacks.Callback "
       "pytorch_lightning.Callback pytorch_lightning.callbacks.Callback pytorch_lightning.callbacks.base.Callback",
       "lightning_callback")
# lightning/pytorch/callbacks/prediction_writer.py: BasePredictionWriter(Callback), the
# same hooks (on_predict_batch_end, ...) plus write_on_batch_end/write_on_epoch_end.
_roles("lightning.pytorch.callbacks.BasePredictionWriter lightning.pytorch.callbacks.prediction_writer.BasePredictionWriter "
       "pytorch_lightning.callbacks.BasePredictionWriter pytorch_lightning.callbacks.prediction_writer.BasePredictionWriter",
       "lightning_callback")
# transformers/modeling_utils.py: PreTrainedModel(nn.Module, ...).
_roles("transformers.PreTrainedModel transformers.modeling_utils.PreTrainedModel", "module", "torch", "hf_model")
# transformers/trainer_callback.py: TrainerCallback.on_step_end(args, state, control, **kwargs).
_roles("transformers.TrainerCallback transformers.trainer_callback.TrainerCallback", "hf_callback")
# transformers/trainer.py: Trainer.compute_loss / training_step / prediction_step.
_roles("transformers.Trainer transformers.trainer.Trainer transformers.Seq2SeqTrainer", "hf_trainer")
# keras/src/models/model.py, keras/src/layers/layer.py (keras 3.15.1); tf.keras in TF 2.x.
_roles("keras.Model keras.models.Model tensorflow.keras.Model tensorflow.keras.models.Model",
       "module", "keras", "keras_model")
_roles("keras.layers.Layer keras.Layer tensorflow.keras.layers.Layer tensorflow.Module", "module", "keras")
# keras/src/callbacks/callback.py: on_train_batch_end(batch, logs) ...
_roles("keras.callbacks.Callback tensorflow.keras.callbacks.Callback", "keras_callback")
# torch/utils/data/dataset.py
_roles("torch.utils.data.Dataset torch.utils.data.IterableDataset torch.utils.data.dataset.Dataset "
       "torch.utils.data.dataset.IterableDataset", "dataset")
# lightning/pytorch/core/datamodule.py: prepare_data/setup/train_dataloader.
_roles("lightning.LightningDataModule lightning.pytorch.LightningDataModule "
       "lightning.pytorch.core.datamodule.LightningDataModule pytorch_lightning.LightningDataModule",
       "datamodule")
# torch/optim/optimizer.py
_roles("torch.optim.Optimizer torch.optim.optimizer.Optimizer", "optimizer")
# pytorch-forecasting 1.1.1 (sktime/pytorch-forecasting commit 63fadd1a):
# pytorch_forecasting/models/base_model.py ``class BaseModel(InitialParameterRepresenterMixIn,
# LightningModule, TupleOutputMixIn)`` and its subclasses there; exported by
# pytorch_forecasting/models/__init__.py and pytorch_forecasting/__init__.py.
_roles(" ".join(f"{where}.{name}" for where in ("pytorch_forecasting", "pytorch_forecasting.models",
                                               "pytorch_forecasting.models.base_model")
                for name in ("BaseModel", "BaseModelWithCovariates", "AutoRegressiveBaseModel",
                             "AutoRegressiveBaseModelWithCovariates")),
       "module", "torch", "lightning_module")
# same release, pytorch_forecasting/metrics/base_metrics.py: ``class Metric(LightningMetric)`` with
# ``from torchmetrics import Metric as LightningMetric`` (torchmetrics/metric.py: ``class
# Metric(Module, ABC)``), and the bases derived from it there (MultiHorizonMetric,
# DistributionLoss, ...); exported by pytorch_forecasting/metrics/__init__.py and
# pytorch_forecasting/__init__.py. A loss of theirs can hold a network
# (``ImplicitQuantileNetworkDistributionLoss.quantile_network``).
_roles(" ".join(f"{where}.{name}" for where in ("pytorch_forecasting", "pytorch_forecasting.metrics",
                                               "pytorch_forecasting.metrics.base_metrics")
                for name in ("Metric", "MultiHorizonMetric", "DistributionLoss", "MultivariateDistributionLoss",
                             "MultiLoss", "CompositeMetric", "AggregationMetric", "TorchMetricWrapper")),
       "module", "torch")

#: Qualified-name prefixes whose capitalised members are modules when
#: subclassed or called: every class in ``torch.nn`` but its functional API
#: and utilities (torch 2.13 ``torch/nn/__init__.py``), ``transformers``
#: model classes, ``torchvision.models`` and ``timm.models`` constructors.
MODULE_NAMESPACE = re.compile(
    r"^torch\.nn\.(?:modules\.\w+\.)?[A-Z]\w*$|^torch\.nn\.parallel\.\w+$|"
    r"^transformers\.(?:models\.[\w.]+\.)?\w*(?:Model|For[A-Z]\w*|LMHead\w*)$"
)
#: ``torch.nn`` loss modules that hold no parameters: each ``__init__`` keeps at most
#: buffers (class weights) and options, so the output has a graph only when an input
#: has one (torch 2.13.0 ``torch/nn/modules/loss.py``; checked against torch 2.13.0+cpu
#: by building each with its defaults and counting ``.parameters()``: 0). Not
#: ``LinearCrossEntropyLoss`` (same file: it owns the weight of a linear projection),
#: ``AdaptiveLogSoftmaxWithLoss`` (``torch/nn/modules/adaptive.py``: head and tail layers)
#: or ``TripletMarginWithDistanceLoss`` (its ``distance_function`` may be a module).
_PARAMETERLESS_LOSSES = (
    "L1Loss NLLLoss NLLLoss2d PoissonNLLLoss GaussianNLLLoss KLDivLoss MSELoss BCELoss BCEWithLogitsLoss "
    "HingeEmbeddingLoss MultiLabelMarginLoss SmoothL1Loss HuberLoss SoftMarginLoss CrossEntropyLoss "
    "MultiLabelSoftMarginLoss CosineEmbeddingLoss MarginRankingLoss MultiMarginLoss TripletMarginLoss CTCLoss"
).split()
#: ``torch.nn`` layers that hold no parameters whatever their arguments, by the file
#: (under ``torch/nn/modules/``, torch 2.13.0) that defines them: no ``__init__`` of these
#: classes creates a ``Parameter`` or takes a module (``grep 'Parameter('`` finds none in
#: pooling.py, dropout.py, padding.py, flatten.py, fold.py, upsampling.py,
#: pixelshuffle.py, channelshuffle.py, distance.py; in activation.py only
#: ``MultiheadAttention`` and ``PReLU`` make one, so they are not listed; in
#: normalization.py only ``LayerNorm``/``GroupNorm``/``RMSNorm`` do; ``Identity`` in
#: linear.py stores nothing), and each, built on torch 2.13.0+cpu, has 0 ``.parameters()``.
#: Their output has a graph only when an input has one and lives where the input lives.
#: Not ``InstanceNorm*`` (instancenorm.py: ``affine=True`` makes a weight and a bias) nor
#: the containers (``Sequential``, ``ModuleList``: their members decide).
_PARAMETERLESS_LAYERS = {
    "pooling": "AvgPool1d AvgPool2d AvgPool3d MaxPool1d MaxPool2d MaxPool3d MaxUnpool1d MaxUnpool2d MaxUnpool3d "
               "AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d AdaptiveMaxPool1d AdaptiveMaxPool2d "
               "AdaptiveMaxPool3d FractionalMaxPool2d FractionalMaxPool3d LPPool1d LPPool2d LPPool3d",
    "activation": "Threshold ReLU RReLU Hardtanh ReLU6 Sigmoid Hardsigmoid Tanh SiLU Mish Hardswish ELU CELU SELU GLU "
                  "GELU Hardshrink LeakyReLU LogSigmoid Softplus Softshrink Softsign Tanhshrink Softmin Softmax "
                  "Softmax2d LogSoftmax",
    "dropout": "Dropout Dropout1d Dropout2d Dropout3d AlphaDropout FeatureAlphaDropout",
    "padding": "CircularPad1d CircularPad2d CircularPad3d ConstantPad1d ConstantPad2d ConstantPad3d ZeroPad1d "
               "ZeroPad2d ZeroPad3d ReflectionPad1d ReflectionPad2d ReflectionPad3d ReplicationPad1d "
               "ReplicationPad2d ReplicationPad3d",
    "flatten": "Flatten Unflatten",
    "fold": "Fold Unfold",
    "upsampling": "Upsample UpsamplingNearest2d UpsamplingBilinear2d",
    "pixelshuffle": "PixelShuffle PixelUnshuffle",
    "channelshuffle": "ChannelShuffle",
    "distance": "PairwiseDistance CosineSimilarity",
    "normalization": "LocalResponseNorm CrossMapLRN2d",
    "linear": "Identity",
}
PARAMETERLESS_MODULES = frozenset(
    [f"torch.nn.{name}" for name in _PARAMETERLESS_LOSSES] + [f"torch.nn.modules.loss.{name}" for name in _PARAMETERLESS_LOSSES]
    + [f"torch.nn.{name}" for names in _PARAMETERLESS_LAYERS.values() for name in names.split()]
    + [f"torch.nn.modules.{file}.{name}" for file, names in _PARAMETERLESS_LAYERS.items() for name in names.split()])
#: torchmetrics metrics: modules (``Metric`` derives from ``torch.nn.Module``,
#: torchmetrics 1.9.0 ``torchmetrics/metric.py``) whose state is registered with
#: ``add_state`` as buffers, never as parameters (no ``Parameter(`` anywhere in the
#: package), so a call -- ``Metric.forward``, then ``_forward_reduce_state_update``
#: or ``_forward_full_state_update``, which run ``update``/``compute`` -- builds a
#: graph only when its inputs have one. Checked on torchmetrics 1.9.0 with torch
#: 2.13.0+cpu: 247 metric classes of the namespaces below, each built with its
#: required arguments, have 0 ``.parameters()``. Only the domains whose metrics
#: compute from the inputs alone: not image/text/multimodal/audio metrics, some of
#: which hold a network (``FrechetInceptionDistance``, ``BERTScore``), nor the
#: wrappers and collections, whose members decide (:data:`METRIC_HOLDERS`).
TORCHMETRICS = "torchmetrics 1.9.0"
STATE_ONLY_METRICS = re.compile(
    r"^torchmetrics\.(?:(?:classification|regression|aggregation|nominal|retrieval|clustering|segmentation)"
    r"(?:\.\w+)?\.)?[A-Z]\w*$"
)
#: torchmetrics names of that pattern that hold other metrics (or are the
#: abstract base): torchmetrics 1.9.0 ``torchmetrics/__init__.py`` exports
#: ``MetricCollection`` (collections.py) and the wrappers of
#: ``torchmetrics/wrappers/``; ``aggregation.Running`` wraps a ``base_metric``.
METRIC_HOLDERS = frozenset(
    f"torchmetrics.{name}" for name in
    "Metric MetricCollection BootStrapper ClasswiseWrapper MetricTracker MinMaxMetric MultioutputWrapper "
    "MultitaskWrapper aggregation.Running aggregation.Metric".split())


def is_state_only_metric(qualified: str | None) -> bool:
    """``qualified`` names a torchmetrics metric class without parameters
    (:data:`STATE_ONLY_METRICS`, less :data:`METRIC_HOLDERS`)."""
    return bool(qualified) and bool(STATE_ONLY_METRICS.match(qualified)) and qualified not in METRIC_HOLDERS


#: Library bases that give a subclass no parameters of their own (torch 2.13.0
#: ``torch/nn/modules/module.py``: ``Module.__init__`` registers none).
PLAIN_MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
#: What creates a parameter of a module (torch 2.13.0 ``torch/nn/parameter.py``,
#: ``torch/nn/modules/module.py`` ``register_parameter``/``register_module``/``add_module``).
PARAMETER_CONSTRUCTORS = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter",
                                    "torch.nn.UninitializedParameter", "torch.nn.parameter.UninitializedParameter"})
PARAMETER_REGISTERING_METHODS = frozenset({"register_parameter", "register_module", "add_module"})
#: ``torch.nn`` names that are not modules.
NOT_MODULES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer", "torch.nn.utils", "torch.nn.init"})


def roles_of_base(qualified: str) -> frozenset[str]:
    """The roles a class gets by deriving from the library class ``qualified``."""
    if qualified in BASE_ROLES:
        return BASE_ROLES[qualified]
    if qualified in NOT_MODULES:
        return frozenset()
    if MODULE_NAMESPACE.match(qualified):
        return frozenset({"module", "torch"})
    return frozenset()


# -- hooks a framework calls ----------------------------------------------------------
@dataclass(frozen=True)
class Hook:
    """A method a framework calls for you.

    ``per_batch``: called once per batch or step (a container on ``self``
    that it appends to grows with the run). ``grad``: "disabled" when the
    framework runs it under ``torch.no_grad``/``inference_mode``, "enabled"
    when it runs it with autograd on, "caller" when it does neither.
    ``batch_on_device``: its ``batch`` argument was moved to the device.
    ``returns_loss``: the framework calls ``backward`` on what it returns
    (or on its ``"loss"`` entry).
    """

    role: str
    name: str
    per_batch: bool
    grad: str
    batch_on_device: bool
    source: str
    returns_loss: bool = False


#: Lightning's ``Trainer``, as annotations, imports and hook parameters spell it.
LIGHTNING_TRAINERS = frozenset({
    "lightning.Trainer", "lightning.pytorch.Trainer", "lightning.pytorch.trainer.trainer.Trainer",
    "pytorch_lightning.Trainer", "pytorch_lightning.trainer.trainer.Trainer"})
#: ``Trainer`` attributes that are the run's training data: iterating one yields a
#: batch per step, the whole training set per pass. ``train_dataloader`` is the fit's
#: train DataLoader(s) wrapped in a ``CombinedLoader`` (lightning
#: ``src/lightning/pytorch/trainer/trainer.py`` ``reset_train_dataloader``: ``self.train_dataloader =
#: CombinedLoader(loaders, ...)``, commit 000699b539781511c1638c8044bb1039bd77677c; a property returning
#: the fit loop's combined loader in lightning 2.6.6).
LIGHTNING_TRAINER_DATA = frozenset({"train_dataloader"})

HOOKS = (
    # lightning/pytorch/loops/training_epoch_loop.py: training_step per batch, grad on;
    # batches moved with `strategy.batch_to_device` before the step.
    # loops/optimization/automatic.py: the closure calls backward on training_step's
    # result or its "loss" entry (ClosureResult.from_training_step_output).
    Hook("lightning_module", "training_step", True, "enabled", True, f"{LIGHTNING} loops/training_epoch_loop.py", True),
    # lightning/pytorch/loops/evaluation_loop.py and prediction_loop.py: `run` is wrapped by
    # `_no_grad_context` (loops/utilities.py), torch.inference_mode by default, else torch.no_grad.
    Hook("lightning_module", "validation_step", True, "disabled", True, f"{LIGHTNING} loops/utilities.py _no_grad_context"),
    Hook("lightning_module", "test_step", True, "disabled", True, f"{LIGHTNING} loops/utilities.py _no_grad_context"),
    Hook("lightning_module", "predict_step", True, "disabled", True, f"{LIGHTNING} loops/utilities.py _no_grad_context"),
    Hook("lightning_module", "on_train_batch_end", True, "caller", True, f"{LIGHTNING} core/hooks.py"),
    Hook("lightning_module", "on_train_batch_start", True, "caller", True, f"{LIGHTNING} core/hooks.py"),
    Hook("lightning_module", "on_before_backward", True, "caller", False, f"{LIGHTNING} core/hooks.py"),
    Hook("lightning_module", "on_after_backward", True, "caller", False, f"{LIGHTNING} core/hooks.py"),
    Hook("lightning_module", "on_before_optimizer_step", True, "caller", False, f"{LIGHTNING} core/hooks.py"),
    Hook("lightning_module", "on_validation_batch_end", True, "disabled", True, f"{LIGHTNING} core/hooks.py"),
    Hook("lightning_module", "on_test_batch_end", True, "disabled", True, f"{LIGHTNING} core/hooks.py"),
    Hook("lightning_module", "on_predict_batch_end", True, "disabled", True, f"{LIGHTNING} core/hooks.py"),
    Hook("lightning_module", "on_train_epoch_end", True, "caller", False, f"{LIGHTNING} core/hooks.py"),
    Hook("lightning_module", "on_validation_epoch_end", True, "disabled", False, f"{LIGHTNING} core/hooks.py"),
    # lightning/pytorch/loops/evaluation_loop.py (commit 7f0c3436cd3f): `run` (under `_no_grad_context`)
    # calls the batch and epoch hooks of validation and test for the module and for every callback,
    # `on_run_end` -> `_on_evaluation_epoch_end` included; prediction_loop.py likewise for predict.
    Hook("lightning_module", "on_validation_batch_start", True, "disabled", True, f"{LIGHTNING} loops/evaluation_loop.py run"),
    Hook("lightning_module", "on_test_batch_start", True, "disabled", True, f"{LIGHTNING} loops/evaluation_loop.py run"),
    Hook("lightning_module", "on_predict_batch_start", True, "disabled", True, f"{LIGHTNING} loops/prediction_loop.py run"),
    Hook("lightning_module", "on_validation_epoch_start", True, "disabled", False, f"{LIGHTNING} loops/evaluation_loop.py run"),
    Hook("lightning_module", "on_test_epoch_start", True, "disabled", False, f"{LIGHTNING} loops/evaluation_loop.py run"),
    Hook("lightning_module", "on_test_epoch_end", True, "disabled", False, f"{LIGHTNING} loops/evaluation_loop.py run"),
    Hook("lightning_module", "on_predict_epoch_start", True, "disabled", False, f"{LIGHTNING} loops/prediction_loop.py run"),
    Hook("lightning_module", "on_predict_epoch_end", True, "disabled", False, f"{LIGHTNING} loops/prediction_loop.py run"),
    Hook("lightning_callback", "on_train_batch_end", True, "caller", True, f"{LIGHTNING} callbacks/callback.py"),
    Hook("lightning_callback", "on_train_batch_start", True, "caller", True, f"{LIGHTNING} callbacks/callback.py"),
    Hook("lightning_callback", "on_validation_batch_end", True, "disabled", True, f"{LIGHTNING} callbacks/callback.py"),
    Hook("lightning_callback", "on_test_batch_end", True, "disabled", True, f"{LIGHTNING} callbacks/callback.py"),
    Hook("lightning_callback", "on_before_backward", True, "caller", False, f"{LIGHTNING} callbacks/callback.py"),
    Hook("lightning_callback", "on_after_backward", True, "caller", False, f"{LIGHTNING} callbacks/callback.py"),
    Hook("lightning_callback", "on_train_epoch_end", True, "caller", False, f"{LIGHTNING} callbacks/callback.py"),
    Hook("lightning_callback", "on_validation_batch_start", True, "disabled", True, f"{LIGHTNING} loops/evaluation_loop.py run"),
    Hook("lightning_callback", "on_test_batch_start", True, "disabled", True, f"{LIGHTNING} loops/evaluation_loop.py run"),
    Hook("lightning_callback", "on_predict_batch_start", True, "disabled", True, f"{LIGHTNING} loops/prediction_loop.py run"),
    Hook("lightning_callback", "on_predict_batch_end", True, "disabled", True, f"{LIGHTNING} loops/prediction_loop.py run"),
    Hook("lightning_callback", "on_validation_epoch_start", True, "disabled", False, f"{LIGHTNING} loops/evaluation_loop.py run"),
    Hook("lightning_callback", "on_validation_epoch_end", True, "disabled", False, f"{LIGHTNING} loops/evaluation_loop.py run"),
    Hook("lightning_callback", "on_test_epoch_start", True, "disabled", False, f"{LIGHTNING} loops/evaluation_loop.py run"),
    Hook("lightning_callback", "on_test_epoch_end", True, "disabled", False, f"{LIGHTNING} loops/evaluation_loop.py run"),
    Hook("lightning_callback", "on_predict_epoch_start", True, "disabled", False, f"{LIGHTNING} loops/prediction_loop.py run"),
    Hook("lightning_callback", "on_predict_epoch_end", True, "disabled", False, f"{LIGHTNING} loops/prediction_loop.py run"),
    # transformers/trainer.py: compute_loss and training_step once per step, grad on;
    # `_prepare_inputs` moves the inputs to the device first.
    # Trainer.training_step calls accelerator.backward(loss) on compute_loss's result.
    Hook("hf_trainer", "compute_loss", True, "enabled", True, f"{TRANSFORMERS} trainer.py Trainer.training_step", True),
    Hook("hf_trainer", "training_step", True, "enabled", True, f"{TRANSFORMERS} trainer.py Trainer._inner_training_loop"),
    # Trainer.evaluation_loop calls prediction_step per batch; only the base implementation
    # wraps its forward in torch.no_grad (trainer.py Trainer.prediction_step), an override does not.
    Hook("hf_trainer", "prediction_step", True, "caller", True, f"{TRANSFORMERS} trainer.py Trainer.evaluation_loop"),
    Hook("hf_callback", "on_step_end", True, "caller", False, f"{TRANSFORMERS} trainer_callback.py"),
    Hook("hf_callback", "on_step_begin", True, "caller", False, f"{TRANSFORMERS} trainer_callback.py"),
    Hook("hf_callback", "on_substep_end", True, "caller", False, f"{TRANSFORMERS} trainer_callback.py"),
    Hook("hf_callback", "on_log", True, "caller", False, f"{TRANSFORMERS} trainer_callback.py"),
    Hook("hf_callback", "on_prediction_step", True, "caller", False, f"{TRANSFORMERS} trainer_callback.py"),
    Hook("hf_callback", "on_optimizer_step", True, "caller", False, f"{TRANSFORMERS} trainer_callback.py"),
    Hook("hf_callback", "on_evaluate", True, "caller", False, f"{TRANSFORMERS} trainer_callback.py"),
    Hook("hf_callback", "on_epoch_end", True, "caller", False, f"{TRANSFORMERS} trainer_callback.py"),
    # keras/src/callbacks/callback.py: the fit/evaluate/predict loops call these per batch or epoch.
    Hook("keras_callback", "on_batch_end", True, "caller", False, f"{KERAS} callbacks/callback.py"),
    Hook("keras_callback", "on_train_batch_end", True, "caller", False, f"{KERAS} callbacks/callback.py"),
    Hook("keras_callback", "on_test_batch_end", True, "caller", False, f"{KERAS} callbacks/callback.py"),
    Hook("keras_callback", "on_predict_batch_end", True, "caller", False, f"{KERAS} callbacks/callback.py"),
    Hook("keras_callback", "on_epoch_end", True, "caller", False, f"{KERAS} callbacks/callback.py"),
)
HOOKS_BY_ROLE: dict[str, dict[str, Hook]] = {}
for _hook in HOOKS:
    HOOKS_BY_ROLE.setdefault(_hook.role, {})[_hook.name] = _hook


def hook_for(roles: frozenset[str], method: str) -> Hook | None:
    """The framework hook a method named ``method`` of a class with ``roles`` is, or None."""
    for role in sorted(roles):
        hook = HOOKS_BY_ROLE.get(role, {}).get(method)
        if hook is not None:
            return hook
    return None


#: Calls that hand a function to a driver that calls it repeatedly:
#: qualified callee or method name -> index of the function argument.
#: ``study.optimize(objective, n_trials=...)`` runs the objective once per
#: trial (optuna/study/study.py, optuna 5.0.0); ``optimizer.step(closure)``
#: A step hook whose batch parameter has this name gets the data iterator
#: itself, and Lightning moves nothing to the device for it (lightning 2.6.6
#: ``loops/utilities.py`` ``_select_data_fetcher`` and ``loops/fetchers.py``
#: ``_DataLoaderIterDataFetcher``, which read the hook's signature).
LIGHTNING_ITERATOR_PARAMETER = "dataloader_iter"
#: calls the closure once or more per step (torch/optim/lbfgs.py, torch 2.13).
REPEATING_DRIVERS = {"optimize": 0, "step": 0}

# -- calls that make values -------------------------------------------------------------
#: Library callables returning a module (or the module they wrap), torch 2.13, accelerate,
#: peft, deepspeed: qualified name -> index of the wrapped module argument (None: a new module).
MODULE_WRAPPERS = {
    "torch.compile": 0,
    "torch.nn.parallel.DistributedDataParallel": 0,
    "torch.nn.DataParallel": 0,
    "torch.nn.parallel.DataParallel": 0,
    "torch.distributed.fsdp.FullyShardedDataParallel": 0,
    "torch.distributed.fsdp.fully_shard": 0,
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel": 0,
    "torch.jit.script": 0,
    "torch.jit.trace": 0,
    "torch.ao.quantization.quantize_dynamic": 0,
    "peft.get_peft_model": 0,
    "peft.prepare_model_for_kbit_training": 0,
    "copy.deepcopy": 0,
}
#: Wrappers that put the module they wrap on the accelerator: ``DataParallel``
#: replicates from ``cuda:0`` (torch/nn/parallel/data_parallel.py, torch 2.13);
#: FSDP's ``device_id`` and DDP's ``device_ids`` name a GPU.
DEVICE_PLACING_WRAPPERS = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_shard",
})
#: ``with`` contexts in which constructors create parameters somewhere other
#: than the CPU: ``with torch.device("cuda"):`` (torch 2.13 ``torch/utils/_device.py``),
#: Fabric's ``init_module``/``init_tensor`` (lightning 2.6.6), accelerate's
#: ``init_empty_weights``/``init_on_device`` (meta or a chosen device).
DEVICE_CONTEXTS = frozenset({"torch.device", "accelerate.init_empty_weights", "accelerate.init_on_device",
                             "accelerate.big_modeling.init_empty_weights", "accelerate.big_modeling.init_on_device"})
DEVICE_CONTEXT_METHODS = frozenset({"init_module", "init_tensor", "sharded_model"})
#: What shows that code runs on an accelerator: a ``.cuda`` attribute
#: (``x.cuda()``, ``torch.cuda.*``), a device or backend string
#: (``"cuda:0"``, ``accelerator="gpu"``, ``"mps"``, the ``"nccl"`` backend, torch 2.13
#: ``torch/distributed/distributed_c10d.py``), a keyword that asks for GPUs
#: (Lightning's ``RunIf(min_cuda_gpus=1)``, ``Trainer(gpus=1)`` of releases < 2.0,
#: transformers' ``device_map=``), or an engine that places work on the accelerator.
ACCELERATOR_ATTRIBUTES = frozenset({"cuda", "is_cuda"})
#: Attributes named ``cuda`` that only describe the build: ``torch.version.cuda`` is the
#: CUDA version string (None on CPU builds; torch 2.13.0 torch/version.py).
CUDA_METADATA = frozenset({"torch.version.cuda"})
#: Modules whose use shows accelerator code: ``torch.accelerator`` (torch >= 2.6),
#: ``torch.cuda``, FSDP (torch 2.13 ``torch/distributed/fsdp``: sharding for GPUs).
#: torch's per-backend device modules (each has ``empty_cache``, ``synchronize``, ...;
#: torch 2.13.0 torch/{cuda,xpu,mps,accelerator}; ``torch.npu`` and ``torch.mlu`` are not in
#: torch: the out-of-tree torch_npu (Ascend) and torch_mlu (Cambricon) plugins register them
#: when imported, source not checked here); ``torch.accelerator`` stands
#: for the backend a program picks at run time (``getattr(torch, device_type)``).
DEVICE_BACKEND_MODULES = frozenset({"torch.cuda", "torch.xpu", "torch.mps", "torch.npu", "torch.mlu", "torch.accelerator"})
RUNTIME_DEVICE_MODULE = "torch.accelerator"
#: ``deepspeed.accelerator``: ``get_accelerator()`` returns the device backend DeepSpeed
#: runs on, CUDA unless ``DS_ACCELERATOR`` or the host says otherwise, and its
#: ``device_name()`` names it (``'cuda'``, ``'cuda:N'``) (deepspeed 0.16.5, commit
#: 38327e07f6cd39b63418f60cedd1651b0be3e7c3, accelerator/real_accelerator.py
#: ``get_accelerator``, accelerator/cuda_accelerator.py ``device_name``).
ACCELERATOR_MODULES = ("torch.accelerator", "torch.cuda", "torch.distributed.fsdp", "deepspeed.accelerator")
#: Keywords of an engine constructor that keep it on the CPU: ``Fabric(accelerator="cpu")``,
#: ``Accelerator(cpu=True)`` (accelerate 1.15.0).
CPU_ENGINE_KEYWORDS = {"accelerator": "cpu", "cpu": True}
ACCELERATOR_STRINGS = re.compile(r"^(?:cuda(?::\d*)?|gpu|mps|nccl)$")
ACCELERATOR_KEYWORDS = re.compile(r"cuda|gpus|^device_map$")
#: Calls that change where every later constructor creates tensors (torch 2.13).
DEFAULT_DEVICE_SETTERS = frozenset({"torch.set_default_device", "torch.set_default_tensor_type"})
#: Library callables that build a new model.
MODEL_FACTORIES = frozenset({
    "timm.create_model", "torch.hub.load", "transformers.AutoModel.from_config",
    "torch.jit.load",  # a RecursiveScriptModule (torch 2.13 torch/jit/_serialization.py)
})
#: ``torch.hub.load`` repositories whose entrypoints return a wrapper whose forward runs
#: without autograd (unless ``autoshape=False``): ultralytics/yolov5 hubconf.py ``_create``
#: wraps the model in ``AutoShape``, whose ``forward`` is decorated ``@smart_inference_mode()``
#: (models/common.py, commit 5081342f04fb287fc2e5f2b5a4e06752b7937b1c). Repository -> the
#: type memlint gives the wrapper.
NO_GRAD_HUB_MODELS = {"ultralytics/yolov5": "yolov5.models.common.AutoShape"}
#: Module types whose forward disables autograd itself: a call is a forward pass without a graph.
NO_GRAD_FORWARD_TYPES = frozenset(NO_GRAD_HUB_MODELS.values())
#: torchmetrics metrics that declare ``is_differentiable = False``: their value
#: is computed from thresholded or argmax predictions (stat scores, counts), so
#: calling one gives a tensor without an autograd graph, whatever its inputs
#: hold (torchmetrics 1.9.0 src/torchmetrics/classification/accuracy.py,
#: precision_recall.py, f_beta.py, stat_scores.py, confusion_matrix.py,
#: auroc.py: each Binary*/Multiclass*/Multilabel* class sets it, and the task
#: wrapper of the same family -- ``Accuracy(task=...)`` -- returns one of them
#: from ``__new__``). Class names; a type of the ``torchmetrics`` namespace
#: ending in one of them is such a metric.
NON_DIFFERENTIABLE_METRIC_FAMILIES = ("Accuracy", "Precision", "Recall", "FBetaScore", "F1Score", "StatScores",
                                      "ConfusionMatrix", "AUROC")
NON_DIFFERENTIABLE_METRICS = frozenset(
    prefix + family for family in NON_DIFFERENTIABLE_METRIC_FAMILIES for prefix in ("", "Binary", "Multiclass", "Multilabel"))
METRICS_ROOT = "torchmetrics"
#: ``X.from_pretrained``/``X.from_config`` builds a model unless X is one of these
#: kinds of object (transformers naming: ``AutoTokenizer``, ``BertConfig``, ...).
NOT_MODEL_CLASS = re.compile(r"Tokenizer|Config|Processor|FeatureExtractor|Scheduler|Pipeline|ImageProcessor|GenerationConfig|Dataset")
#: Library classes whose instances are known not to be modules, although
#: they share a method name with modules (``Trainer.train()``, ``Accelerator.prepare``).
NOT_MODULE_TYPES = re.compile(
    r"^(?:transformers\.(?:\w+\.)*\w*Trainer|trl\.(?:\w+\.)*\w*Trainer|lightning\.(?:pytorch\.)?Trainer|"
    r"pytorch_lightning\.Trainer|lightning\.(?:fabric\.)?Fabric|accelerate\.Accelerator|"
    r"sklearn\.\S+|xgboost\.\S+|lightgbm\.\S+)$"
)
#: Import roots of Keras (keras 3.15.1, tf.keras of tensorflow 2.x, tf_keras):
#: ``keras.Model.predict`` runs a whole-dataset inference per call.
KERAS_ROOTS = frozenset({"keras", "tensorflow", "tf_keras"})
#: Libraries whose classes have a ``fit`` of their own: scikit-learn's estimator API
#: (``fit(X, y)`` of every estimator and transformer, scikit-learn 1.x
#: ``sklearn/base.py`` ``BaseEstimator``; developers' guide "APIs of scikit-learn
#: objects"). Their ``fit`` runs no TensorFlow.
NON_KERAS_FIT_LIBRARIES = frozenset({"sklearn"})
#: Attributes every Keras layer, hence every model, has: the ``trainable_weights`` /
#: ``trainable_variables`` properties of ``Layer`` (keras 3.15.1 ``keras/src/layers/layer.py``;
#: tf.keras 2.x ``keras/engine/base_layer.py``). An object of unknown class that a file
#: importing Keras calls and reads one of these from (``tape.gradient(loss,
#: model.trainable_variables)``) is used as a Keras model.
KERAS_MODEL_ATTRIBUTES = frozenset({"trainable_variables", "trainable_weights"})
#: Import roots that provide no object with a ``predict`` method: numerical,
#: data, image, plotting and progress libraries (numpy, pandas, scipy, PIL,
#: OpenCV, matplotlib, h5py, imageio, tqdm, absl flags, PyYAML). With Keras and
#: the standard library (:data:`sys.stdlib_module_names`, less the modules
#: that load arbitrary objects), a file importing only these can get a
#: ``predict`` only from Keras or from its own classes.
NO_PREDICT_LIBRARIES = frozenset({
    "numpy", "pandas", "scipy", "PIL", "cv2", "matplotlib", "h5py", "imageio", "tqdm", "absl", "yaml", "seaborn",
})
#: Standard-library modules that load arbitrary objects (which may have ``predict``).
OBJECT_LOADING_STDLIB = frozenset({"pickle", "_pickle", "shelve", "marshal", "copyreg", "importlib", "code"})
#: Optimizer constructors and factories besides ``torch.optim.<Name>``.
OPTIMIZER_FACTORIES = frozenset({
    "transformers.AdamW", "transformers.Adafactor", "transformers.optimization.Adafactor",
    "timm.optim.create_optimizer", "timm.optim.create_optimizer_v2",
    "torch.distributed.optim.ZeroRedundancyOptimizer", "torch.distributed.optim.DistributedOptimizer",
    "apex.optimizers.FusedAdam", "apex.optimizers.FusedLAMB", "deepspeed.ops.adam.FusedAdam",
    # horovod/torch/optimizer.py (horovod 0.28.1): ``DistributedOptimizer(optimizer, named_parameters=...)``
    # returns an instance of a subclass of ``optimizer.__class__`` (built with ``type(...)``) whose
    # ``step`` allreduces the gradients and steps the wrapped optimizer; ``zero_grad`` is its own.
    "horovod.torch.DistributedOptimizer", "horovod.torch.optimizer.DistributedOptimizer",
    # IBM/aihwkit aihwkit/optim/analog_optimizer.py: ``AnalogSGD`` and ``AnalogAdam`` are
    # ``torch.optim.SGD``/``Adam`` with an analog mixin (``AnalogOptimizerMixin``); ``zero_grad``
    # is torch's, gradients accumulate until it is called (IBM/aihwkit#446)
    "aihwkit.optim.AnalogSGD", "aihwkit.optim.AnalogAdam",
    "aihwkit.optim.analog_optimizer.AnalogSGD", "aihwkit.optim.analog_optimizer.AnalogAdam",
})
#: Namespaces whose classes a program picks by a run-time name (``getattr(torch.optim,
#: args.optimizer)(model.parameters())``), and the class that stands for the pick: every
#: capitalised public name of ``torch.optim`` is an ``Optimizer`` subclass (torch 2.13.0
#: ``torch/optim/__init__.py`` ``__all__``: Adadelta ... SGD, SparseAdam, Optimizer; its
#: lower-case names are the submodules ``lr_scheduler``/``swa_utils``).
OPTIMIZER_CLASS_NAMESPACES = {"torch.optim": "torch.optim.Optimizer"}
OPTIMIZER_NAMESPACE = re.compile(r"^(?:torch\.optim|bitsandbytes\.optim|bnb\.optim|apex\.optimizers|torch_optimizer)\.[A-Z]\w*$")
LR_SCHEDULER_NAMESPACE = re.compile(r"^(?:torch\.optim\.lr_scheduler\.\w+|transformers\.get_\w*schedule\w*|transformers\.optimization\.get_\w+)$")
#: Distributed-autograd optimizers step with a context id and need no zero_grad
#: (torch/distributed/optim/optimizer.py, torch 2.13: gradients live in the context).
CONTEXT_OPTIMIZERS = frozenset({"torch.distributed.optim.DistributedOptimizer"})
#: Callables returning a stream of batches.
STREAM_FACTORIES = frozenset({
    "torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader",
    "tensorflow.data.Dataset.from_tensor_slices", "tensorflow.data.Dataset.from_generator",
    "datasets.load_dataset", "torch.utils.data.random_split",
})
#: Library types whose instances, iterated, yield the data one batch or
#: sample at a time, so that a parameter annotated with one is a stream:
#: ``tf.data.Dataset`` (tensorflow/python/data/ops/dataset_ops.py
#: ``DatasetV2.__iter__``), torch's ``DataLoader``/``Dataset``/
#: ``IterableDataset`` (torch/utils/data, torch 2.13.0) and Hugging Face
#: ``datasets.Dataset``/``IterableDataset`` (arrow_dataset.py, iterable_dataset.py).
STREAM_TYPES = frozenset({
    "tensorflow.data.Dataset", "tensorflow.compat.v2.data.Dataset", "torch.utils.data.DataLoader",
    "torch.utils.data.Dataset", "torch.utils.data.IterableDataset", "torch.utils.data.dataloader.DataLoader",
    "datasets.Dataset", "datasets.IterableDataset",
})
#: Methods of a stream of batches that return the stream transformed (still
#: a stream): ``tf.data.Dataset`` (tensorflow/python/data/ops/dataset_ops.py:
#: batch, padded_batch, prefetch, shuffle, repeat, cache, take, skip, unbatch,
#: shard, map, filter) and ``datasets.Dataset`` (arrow_dataset.py: map,
#: filter, shuffle, take, skip, shard).
STREAM_PIPELINE_METHODS = frozenset({
    "batch", "padded_batch", "prefetch", "shuffle", "repeat", "cache", "take", "skip", "unbatch", "shard", "map", "filter",
})
#: Exceptions raised when the accelerator runs out of memory (torch 2.13:
#: torch/cuda/__init__.py ``OutOfMemoryError = torch._C.OutOfMemoryError``,
#: also ``torch.OutOfMemoryError``; torch/cuda/memory.py neither defines nor imports it,
#: so ``torch.cuda.memory.OutOfMemoryError`` does not exist).
OOM_ERRORS = frozenset({"torch.cuda.OutOfMemoryError", "torch.OutOfMemoryError"})
#: Library predicates that tell an out-of-memory error from another exception:
#: lightning/pytorch/utilities/memory.py ``is_oom_error``,
#: lightning/fabric/utilities (same), accelerate/utils/memory.py ``should_reduce_batch_size``.
OOM_TESTS = frozenset({
    "lightning.pytorch.utilities.memory.is_oom_error", "pytorch_lightning.utilities.memory.is_oom_error",
    "accelerate.utils.memory.should_reduce_batch_size", "accelerate.utils.should_reduce_batch_size",
})
#: Text of the message of an out-of-memory RuntimeError (c10/cuda/CUDACachingAllocator.cpp:
#: "CUDA out of memory. Tried to allocate ..."; HIP and XPU say "out of memory" too).
OOM_MESSAGE = "out of memory"
#: Autograd's functional entry points: the parameter that takes the tensors to
#: differentiate, by keyword (position 0), and the position of ``retain_graph``
#: (torch 2.13 torch/autograd/__init__.py: ``backward(tensors, grad_tensors=None,
#: retain_graph=None, ...)``, ``grad(outputs, inputs, grad_outputs=None,
#: retain_graph=None, ...)``).
AUTOGRAD_FUNCTIONS = {
    "torch.autograd.backward": ("tensors", 2),
    "torch.autograd.grad": ("outputs", 3),
}
#: Switches of autograd's anomaly mode (torch 2.13 torch/autograd/anomaly_mode.py:
#: ``detect_anomaly`` is a context manager, ``set_detect_anomaly(mode)`` a
#: function that also works as one).
ANOMALY_CONTEXTS = frozenset({"torch.autograd.detect_anomaly", "torch.autograd.anomaly_mode.detect_anomaly"})
ANOMALY_SETTERS = frozenset({"torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode.set_detect_anomaly"})
#: Trainers whose keyword turns anomaly mode on for the whole fit
#: (lightning/pytorch/trainer/trainer.py ``Trainer(detect_anomaly=...)``, run
#: as ``torch.autograd.set_detect_anomaly(self._detect_anomaly)`` around the loop).
ANOMALY_TRAINER_KEYWORDS = {
    "lightning.Trainer": "detect_anomaly", "lightning.pytorch.Trainer": "detect_anomaly",
    "pytorch_lightning.Trainer": "detect_anomaly", "lightning.pytorch.trainer.trainer.Trainer": "detect_anomaly",
}
#: Readers that return Python object trees (dicts, lists, strings): json,
#: pickle, PyYAML, ujson, orjson. Each element is a refcounted Python object.
PYTHON_OBJECT_READERS = frozenset({
    "json.load", "json.loads", "pickle.load", "pickle.loads", "yaml.load", "yaml.safe_load", "yaml.full_load",
    "yaml.unsafe_load", "ujson.load", "ujson.loads", "orjson.loads", "_pickle.load", "dill.load",
})
#: Methods of text files (io) and strings that return a list of lines.
LINE_READING_METHODS = frozenset({"readlines", "splitlines"})
#: Calls that list the entries of a directory: as many as the directory holds
#: (Python 3.11 ``os.listdir``, ``os.scandir``, ``os.walk``; ``glob.glob``, ``glob.iglob``,
#: Lib/glob.py, CPython 3.11.7).
DIRECTORY_LISTINGS = frozenset({"os.listdir", "os.scandir", "os.walk", "glob.glob", "glob.iglob"})
#: ``pathlib.Path`` methods that yield the entries of a directory, as many as it holds
#: (CPython 3.11.7 Lib/pathlib.py ``Path.iterdir``, ``Path.glob``, ``Path.rglob``), by the
#: type of the receiver the semantic model gives.
PATH_TYPES = frozenset({"pathlib.Path", "pathlib.PosixPath", "pathlib.WindowsPath"})
PATH_DIRECTORY_LISTINGS = frozenset({"iterdir", "glob", "rglob"})
#: Readers of array files: ``numpy.load`` returns the stored array, or for an ``.npz``
#: an ``NpzFile`` mapping each name to its array (numpy 1.26.4 numpy/lib/npyio.py
#: ``load``, ``NpzFile.__getitem__``). A loop over its rows runs once per record the
#: file holds.
ARRAY_FILE_READERS = frozenset({"numpy.load"})
#: Readers that load one file, named by their first argument: a loop that calls one
#: with its item reads a file per iteration (one image, volume or array per file on
#: disk). nibabel ``load(filename)`` (nipy/nibabel @c3c3e04 nibabel/loadsave.py);
#: ``numpy.load(file, ...)`` (numpy 2.4.6 numpy/lib/_npyio_impl.py);
#: ``PIL.Image.open(fp, ...)`` (pillow 13.0.0 PIL/Image.py); ``imread(fname, ...)``
#: (matplotlib 3.11.2 matplotlib/image.py and pyplot.py); ``torch.load(f, ...)``
#: (torch 2.13.0 torch/serialization.py).
FILE_READERS = frozenset({"nibabel.load", "numpy.load", "PIL.Image.open", "matplotlib.image.imread",
                          "matplotlib.pyplot.imread", "torch.load"})
#: Readers of :data:`PYTHON_OBJECT_READERS` whose files hold data records (annotations,
#: pickled samples) as often as settings; YAML files are, in training code, configuration:
#: a few entries the author wrote, a bounded structure.
DATA_RECORD_READERS = frozenset(name for name in PYTHON_OBJECT_READERS if not name.startswith("yaml."))
#: Loaders that draw batches from the dataset given as their first argument (or
#: ``dataset=``): torch's ``DataLoader(dataset, batch_size=1, ...)`` (torch 2.13.0
#: torch/utils/data/dataloader.py ``DataLoader.__init__``) and PyTorch Geometric's
#: ``DataLoader(dataset, batch_size=1, shuffle=False, ...)``, which collates a list of
#: graphs (torch_geometric 2.6.1 torch_geometric/loader/dataloader.py; before 2.0 it was
#: ``torch_geometric.data.DataLoader``, torch_geometric 1.7.2 torch_geometric/data/dataloader.py).
BATCH_LOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader",
                           "torch_geometric.loader.DataLoader", "torch_geometric.loader.dataloader.DataLoader",
                           "torch_geometric.data.DataLoader"})
#: DataLoader constructors and the keyword that forks worker processes
#: (torch/utils/data/dataloader.py ``DataLoader(num_workers=0)``: 0 = in process).
DATALOADER_WORKERS = {"torch.utils.data.DataLoader": "num_workers", "torch.utils.data.dataloader.DataLoader": "num_workers"}
#: torchdata's ``DataLoader2(datapipe, datapipe_adapter_fn=None, reading_service=None)``
#: -> (keyword, position) of its reading service (pytorch/data @27e3c2d
#: torchdata/dataloader2/dataloader2.py ``DataLoader2.__init__``).
DATAPIPE_LOADERS = {"torchdata.dataloader2.DataLoader2": ("reading_service", 2),
                    "torchdata.dataloader2.dataloader2.DataLoader2": ("reading_service", 2)}
#: Reading services that run the datapipe graph in worker processes, -> (keyword, position)
#: of their worker count, 0 by default: ``MultiProcessingReadingService(num_workers=0, ...)``
#: runs the replicable part of the graph in ``num_workers`` processes, in process when 0
#: (pytorch/data @27e3c2d torchdata/dataloader2/reading_service.py ``initialize``).
WORKER_READING_SERVICES = {"torchdata.dataloader2.MultiProcessingReadingService": ("num_workers", 0),
                           "torchdata.dataloader2.reading_service.MultiProcessingReadingService": ("num_workers", 0)}
#: Functional datapipe methods whose callable runs on every element, where the pipeline
#: runs, -> (keywords, position) of that callable: ``map`` is ``MapperIterDataPipe(datapipe,
#: fn, ...)``, ``collate`` is ``CollatorIterDataPipe(datapipe, conversion=default_collate,
#: collate_fn=None)``, ``filter`` is ``FilterIterDataPipe(datapipe, filter_fn, ...)``
#: (torch 2.13.0 torch/utils/data/datapipes/iter/callable.py and selecting.py).
DATAPIPE_CALLBACKS = {"map": (("fn",), 0), "collate": (("conversion", "collate_fn"), 0), "filter": (("filter_fn",), 0)}
#: Objects whose ``backward(loss)`` method runs the backward pass of ``loss``
#: (accelerate/accelerator.py, lightning/fabric/fabric.py, deepspeed runtime engine).
BACKWARD_ENGINES = frozenset({"accelerate.Accelerator", "lightning.Fabric", "lightning.fabric.Fabric", "deepspeed.DeepSpeedEngine"})
#: Engines whose ``step()`` clears the gradients itself: ``DeepSpeedEngine.step()`` runs
#: ``_take_model_step`` at each gradient-accumulation boundary, which steps the optimizer
#: and then zeroes the gradients (``self.optimizer.zero_grad()`` or ``self.zero_grad()``)
#: (deepspeed 0.16.5, commit 38327e07f6cd39b63418f60cedd1651b0be3e7c3,
#: deepspeed/runtime/engine.py ``DeepSpeedEngine.step`` and ``_take_model_step``). Of the
#: :data:`BACKWARD_ENGINES`, it is the one with a ``step()``: accelerate's and Fabric's
#: ``backward(loss)`` leave stepping and clearing to the optimizer.
SELF_CLEARING_ENGINES = frozenset({"deepspeed.DeepSpeedEngine"})
#: Library builders of a module whose forward runs an adversarial attack, with autograd,
#: when called with the keyword named here set true: MadryLab/robustness @a954124
#: robustness/model_utils.py ``make_and_restore_model`` returns ``(AttackerModel, checkpoint)``
#: (l.87 ``model = AttackerModel(classifier_model, dataset)``, l.112), and
#: robustness/attacker.py ``AttackerModel.forward(inp, target=None, make_adv=False, ...)``
#: (l.277, l.309 ``if make_adv:``) runs PGD: ``x.clone().detach().requires_grad_(True)``
#: then ``ch.autograd.grad(m * loss, [x])`` or ``sl.backward()`` (l.190-204). Such a forward
#: needs autograd: it is no inference-only forward pass.
ATTACKING_FORWARD = {
    "robustness.model_utils.make_and_restore_model": "make_adv",
    "robustness.attacker.AttackerModel": "make_adv",
}
#: Methods of the :data:`BACKWARD_ENGINES` that ``torch.Tensor`` lacks: called on a value,
#: they say it is an engine, not a tensor whose ``backward(gradient)`` takes a gradient.
#: accelerate ``Accelerator.prepare`` / ``accumulate`` / ``unwrap_model`` /
#: ``wait_for_everyone`` / ``gather_for_metrics`` / ``autocast`` (huggingface/accelerate
#: commit 9f71f0b8b9f0a410475e49cf19f87053f0c88cf9, src/accelerate/accelerator.py);
#: Fabric ``setup`` / ``setup_dataloaders`` (lightning/fabric/fabric.py). None of them is
#: an attribute of ``torch.Tensor`` (torch 2.13.0, ``hasattr(torch.Tensor, name)`` False).
ENGINE_ONLY_METHODS = frozenset({
    "prepare", "accumulate", "unwrap_model", "wait_for_everyone", "gather_for_metrics", "autocast",
    "setup", "setup_dataloaders",
})
#: ``deepspeed.initialize(model=..., optimizer=...)`` returns ``(engine, optimizer,
#: training_dataloader, lr_scheduler)``; the engine is an ``nn.Module`` wrapping the
#: model, moved to the local accelerator (DeepSpeed docs, initialize.html; runtime/engine.py).
#: State-dict getters whose result holds host tensors: by function name, the
#: qualified names that always offload (FSDP1 ``full_optim_state_dict``
#: consolidates with ``cpu_offload=True``, torch 2.13.0
#: distributed/fsdp/fully_sharded_data_parallel.py ``_optim_state_dict_impl``);
#: the others offload when their ``StateDictOptions`` say ``cpu_offload=True``
#: (torch 2.13.0 distributed/checkpoint/state_dict.py).
HOST_STATE_DICTS = {
    "full_optim_state_dict": frozenset({"torch.distributed.fsdp.FullyShardedDataParallel.full_optim_state_dict",
                                        "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel.full_optim_state_dict"}),
    "get_model_state_dict": frozenset(),
    "get_optimizer_state_dict": frozenset(),
    "get_state_dict": frozenset(),
}
DEEPSPEED_INITIALIZE = "deepspeed.initialize"
#: Class decorators whose generated ``__init__`` ends by calling a method of the
#: class, so that method runs once, at construction: decorator (qualified name) ->
#: the method. CPython 3.11.7 Lib/dataclasses.py: ``_POST_INIT_NAME =
#: '__post_init__'``; ``_init_fn`` appends ``self.__post_init__(...)`` to the
#: generated ``__init__`` when the class defines it.
POST_INIT_METHODS = {"dataclasses.dataclass": "__post_init__"}
ENGINE_TYPES = {
    "accelerate.Accelerator": "accelerate.Accelerator",
    "lightning.Fabric": "lightning.Fabric",
    "lightning.fabric.Fabric": "lightning.Fabric",
}
#: Engine methods that return their first argument gathered or reduced across
#: processes, on the same device (accelerate 1.15.0 utils/operations.py gather /
#: reduce / pad_across_processes return the tensor itself in a single process;
#: lightning 2.6.6 fabric.py all_gather / all_reduce).
GATHERING_METHODS = frozenset({"gather", "gather_for_metrics", "reduce", "pad_across_processes",
                               "all_gather", "all_reduce"})
#: Collective functions whose result is their tensor argument reduced, gathered or
#: broadcast through a ``torch.autograd.Function``: it keeps the argument's graph and
#: device. Qualified name -> (position, keyword) of that argument. Source:
#: horovod/torch/mpi_ops.py (horovod/horovod at 0134dd6d): ``allreduce``,
#: ``allgather`` and ``broadcast`` return ``HorovodAllreduce.apply(...)``,
#: ``HorovodAllgather.apply(...)``, ``HorovodBroadcast.apply(...)`` ("if your input
#: tensor requires gradients, ... gradients [can] be computed and backpropagated");
#: the in-place ``allreduce_``/``broadcast_`` are no autograd functions (not listed).
GRAPH_KEEPING_COLLECTIVES = {
    "horovod.torch.allreduce": (0, "tensor"),
    "horovod.torch.allgather": (0, "tensor"),
    "horovod.torch.broadcast": (0, "tensor"),
    "horovod.torch.mpi_ops.allreduce": (0, "tensor"),
    "horovod.torch.mpi_ops.allgather": (0, "tensor"),
    "horovod.torch.mpi_ops.broadcast": (0, "tensor"),
}
#: ``engine.prepare(...)``/``fabric.setup(...)`` return their arguments prepared
#: (modules on the device, loaders yielding device batches) — accelerate/accelerator.py
#: ``Accelerator.prepare``, lightning/fabric/fabric.py ``Fabric.setup``/``setup_dataloaders``.
PREPARE_METHODS = frozenset({"prepare", "prepare_model", "prepare_data_loader", "setup", "setup_module", "setup_dataloaders"})
#: GradScaler constructors (torch/amp/grad_scaler.py; the torch.cuda.amp alias is deprecated).
GRAD_SCALERS = frozenset({"torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler", "torch.GradScaler"})

#: ``ModelOutput`` fields that hold one tensor (transformers/modeling_outputs.py);
#: ``hidden_states``/``attentions``/``past_key_values`` are tuples.
MODEL_OUTPUT_TENSORS = frozenset({
    "loss", "logits", "last_hidden_state", "pooler_output", "start_logits", "end_logits",
    "prediction_logits", "seq_relationship_logits", "image_embeds", "text_embeds", "logits_per_image",
    "logits_per_text", "sample", "pred_boxes", "pred_logits",
})
#: The keyword (and its literal value) that makes a transformers model return a plain
#: tuple of tensors instead of a ``ModelOutput``: ``can_return_tuple`` calls
#: ``output.to_tuple()`` when ``return_dict=False`` is passed (transformers 5.24.0
#: utils/generic.py ``can_return_tuple``; each model's ``forward`` did the same with
#: ``if not return_dict: return (...)`` in transformers 4.x modeling_bert.py).
MODEL_OUTPUT_TUPLE_KEYWORD = ("return_dict", False)
#: ``torch.func`` transforms whose result computes gradients (or Jacobians) of the
#: function it wraps: calling it runs that function's forward and its backward in one
#: call and returns the gradients, so no graph is left for a later backward (torch
#: 2.13.0 ``torch/_functorch/eager_transforms.py``: ``grad``, ``grad_and_value``,
#: ``vjp``, ``jacrev``, ``jacfwd``, ``hessian``; ``torch/_functorch/apis.py``:
#: ``grad``, ``grad_and_value``; the same functions under ``functorch`` 2.x).
GRADIENT_TRANSFORMS = frozenset(
    f"{root}.{name}" for root in ("torch.func", "functorch")
    for name in ("grad", "grad_and_value", "vjp", "jacrev", "jacfwd", "hessian"))
#: ``torch.func`` transforms that map the function they wrap over a batch and
#: compute what it computes (torch 2.13.0 ``torch/_functorch/apis.py`` ``vmap``):
#: ``vmap(grad(f))`` computes per-sample gradients.
BATCHING_TRANSFORMS = frozenset({"torch.func.vmap", "torch.vmap", "functorch.vmap"})
#: Module methods of library models that run no autograd: ``GenerationMixin.generate`` is
#: decorated with ``@torch.no_grad()`` (transformers/generation/utils.py).
NO_GRAD_MODULE_METHODS = frozenset({"generate"})
#: Sentence-embedding models: torch modules (``class SentenceTransformer(nn.Sequential)``,
#: UKPLab/sentence-transformers commit 0014d2bc685777d929b087163ba153799df873a0
#: sentence_transformers/SentenceTransformer.py; ``class INSTRUCTOR(SentenceTransformer)``,
#: xlang-ai/instructor-embedding commit 619dda2bfbab22b3e623cb5893472eacae19f4a1
#: InstructorEmbedding/instructor.py). Without ``device=`` the constructor picks
#: ``"cuda"`` when one is available (same file, ``__init__``).
SENTENCE_ENCODERS = frozenset({
    "sentence_transformers.SentenceTransformer", "sentence_transformers.SentenceTransformer.SentenceTransformer",
    "InstructorEmbedding.INSTRUCTOR", "InstructorEmbedding.instructor.INSTRUCTOR"})
#: Their methods that run the forward pass under ``torch.no_grad()`` and return detached
#: embeddings: a numpy array by default, device tensors with ``convert_to_tensor=True`` or
#: ``convert_to_numpy=False`` (sentence_transformers/SentenceTransformer.py ``encode``, commit above).
SENTENCE_ENCODER_METHODS = frozenset({"encode"})
#: Namespaces whose callables return host values (paths, strings, numbers, numpy
#: arrays), never a tensor with an autograd graph: storing their result keeps none.
HOST_VALUE_NAMESPACES = frozenset({
    "os", "re", "json", "pathlib", "glob", "string", "time", "datetime", "logging", "math", "random",
    "argparse", "subprocess", "shutil", "inspect", "textwrap", "csv", "numpy"})
#: Type name of a ``numpy.ndarray`` value (a PLAIN value: host memory, no graph).
NUMPY_ARRAY = "numpy.ndarray"
#: numpy callables that return a new ``numpy.ndarray`` whatever array-like they are
#: given (numpy 2.x reference: "Array creation routines" -- ``array``, ``asarray``,
#: ``zeros``/``ones``/``empty``/``full`` and their ``_like`` forms, ``arange``,
#: ``linspace``; "Array manipulation routines" -- ``stack``, ``concatenate``,
#: ``vstack``, ``hstack``, ``expand_dims``, ``reshape``: each documents "Returns: ndarray").
NUMPY_ARRAY_FACTORIES = frozenset(f"numpy.{name}" for name in (
    "array", "asarray", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like",
    "arange", "linspace", "stack", "concatenate", "vstack", "hstack", "expand_dims", "reshape"))
#: torch callables that build metadata objects, not tensors (torch 2.13.0).
HOST_VALUE_CALLABLES = frozenset({"torch.device", "torch.Size", "torch.finfo", "torch.iinfo", "torch.dtype"})
#: Namespaces whose callables never run a model's forward pass (the standard
#: library and numpy): a function that calls only these and builtins runs none.
#: Those that return host values are among them; the others may return
#: containers, copies or callables of what they are given.
NON_MODEL_NAMESPACES = HOST_VALUE_NAMESPACES | frozenset({
    "np", "sys", "itertools", "functools", "collections", "warnings", "typing", "copy", "pickle", "dataclasses",
    "operator", "contextlib", "io", "enum"})

#: Context managers and decorators that set the grad mode (torch/autograd/grad_mode.py, torch 2.13).
GRAD_DISABLING = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad",
                            "torch.autograd.grad_mode.no_grad", "torch.autograd.inference_mode",
                            "torch.autograd.grad_mode.inference_mode"})
GRAD_ENABLING = frozenset({"torch.enable_grad", "torch.autograd.enable_grad", "torch.autograd.grad_mode.enable_grad"})
GRAD_SETTERS = frozenset({"torch.set_grad_enabled", "torch.autograd.set_grad_enabled", "torch.autograd.grad_mode.set_grad_enabled"})

#: Top-level packages whose import marks a file as PyTorch code, and as TensorFlow/Keras code.
TORCH_PACKAGES = ("torch", "lightning", "pytorch_lightning", "accelerate", "transformers", "deepspeed", "timm",
                  "torchvision", "torchaudio", "fairseq", "peft", "trl", "diffusers", "lightning_fabric", "apex")
TF_PACKAGES = ("tensorflow", "keras", "tf_keras")

# -- TensorFlow / Keras values ------------------------------------------------------------
#: Keras calls that return a model besides ``Sequential``/``Model``/``load_model`` and
#: ``keras.applications.*`` (keras 3.15.1 ``keras/src/models/cloning.py`` ``clone_model``,
#: ``keras/src/models/model.py`` ``model_from_json``, ``keras/src/saving/saving_api.py``).
KERAS_MODEL_CALLS = frozenset({"clone_model", "model_from_json", "model_from_config", "model_from_yaml"})
#: ``self.model`` of a Keras callback is the model being fit (keras 3.15.1
#: ``keras/src/callbacks/callback.py``: ``set_model`` and the ``model`` property).
KERAS_CALLBACK_MODEL_ATTRIBUTE = "model"
#: ``tf.function`` (tensorflow 2.x ``tensorflow/python/eager/polymorphic_function/polymorphic_function.py``
#: ``function``; exported as ``tf.function`` and ``tf.compat.v1.function``/``v2``).
TF_FUNCTIONS = frozenset({"tensorflow.function", "tensorflow.compat.v1.function", "tensorflow.compat.v2.function"})
#: Keywords of ``tf.function`` that fix the traced signature: ``input_signature`` (one
#: concrete function for all calls). ``reduce_retracing`` (``experimental_relax_shapes``
#: before TF 2.9) generalises shapes, never Python values, so it does not count.
TF_FUNCTION_SIGNATURE = "input_signature"
#: Type names of ``tf.function(f)`` values: without and with an ``input_signature``.
TF_FUNCTION = "tensorflow.function"
TF_FUNCTION_SIGNED = "tensorflow.function[input_signature]"
#: Argument types a ``tf.function`` traces by shape and dtype, never by value: a
#: ``numpy.ndarray`` gets the trace type of a tensor of its shape and dtype
#: (tensorflow ``tensorflow/core/function/trace_type/trace_type_builder.py``
#: ``from_value``: ``util.is_np_ndarray(value)`` -> ``default_types.TENSOR(ndarray.shape,
#: ndarray.dtype)``, commit 03db37846ab721f0f9581e323ec721b0b96dcc79; before the trace-type
#: rewrite, ``function.py`` ``_convert_numpy_inputs`` turned every ndarray into a tensor).
#: A new array of the same shape and dtype per call reuses the trace.
TF_TRACED_BY_SPEC = frozenset({NUMPY_ARRAY})
#: TF1 graph-mode sessions (``tf.Session`` of TF 1.x, ``tf.compat.v1.Session`` in 2.x,
#: ``tensorflow/python/client/session.py``; ``MonitoredTrainingSession`` in
#: ``tensorflow/python/training/monitored_session.py``).
TF_SESSIONS = frozenset({
    "tensorflow.Session", "tensorflow.compat.v1.Session", "tensorflow.InteractiveSession",
    "tensorflow.compat.v1.InteractiveSession", "tensorflow.train.MonitoredTrainingSession",
    "tensorflow.compat.v1.train.MonitoredTrainingSession", "tensorflow.train.MonitoredSession",
    "tensorflow.compat.v1.train.MonitoredSession", "tensorflow.train.SingularMonitoredSession",
    "tensorflow.compat.v1.train.SingularMonitoredSession",
})
#: Calls that return the session already made (``tensorflow/python/framework/ops.py``
#: ``get_default_session``; ``tf.keras.backend.get_session`` in TF 1.x/2.x compat).
TF_SESSION_GETTERS = frozenset({
    "tensorflow.get_default_session", "tensorflow.compat.v1.get_default_session",
    "tensorflow.keras.backend.get_session", "tensorflow.compat.v1.keras.backend.get_session", "keras.backend.get_session",
})
SESSION = "tensorflow.Session"
#: ``tf.GradientTape`` (``tensorflow/python/eager/backprop.py``).
TF_TAPES = frozenset({"tensorflow.GradientTape", "tensorflow.autodiff.GradientTape"})
GRADIENT_TAPE = "tensorflow.GradientTape"
#: Iterators that yield one item per checkpoint a training job writes: TF 2.13.1
#: ``tensorflow/python/training/checkpoint_utils.py`` ``checkpoints_iterator(checkpoint_dir,
#: min_interval_secs=0, timeout=None, timeout_fn=None)`` "continuously yield[s] new
#: checkpoint files as they appear" (string paths), waiting for each; exported as
#: ``tf.train.checkpoints_iterator``, ``tf.compat.v1.train.checkpoints_iterator`` and (the
#: v2 API under ``tf.compat.v2``) ``tf.compat.v2.train.checkpoints_iterator``.
TF_CHECKPOINT_STREAMS = frozenset({
    "tensorflow.train.checkpoints_iterator", "tensorflow.compat.v1.train.checkpoints_iterator",
    "tensorflow.compat.v2.train.checkpoints_iterator",
})



#: ``torch.autograd.Variable(t)``: since the Tensor/Variable merge it returns a
#: new tensor that shares ``t``'s storage and has no history (``grad_fn`` None,
#: even for a ``t`` with one), requiring grad only with ``requires_grad=True``.
#: torch 2.13.0 ``torch/autograd/variable.py`` (``class Variable(torch._C._LegacyVariableBase)``);
#: measured on the installed torch 2.13.0: ``Variable(a * 2).grad_fn is None``, its
#: ``data_ptr()`` equals ``(a * 2).data_ptr()``, ``Variable(t, requires_grad=True).requires_grad``.
LEGACY_VARIABLE = frozenset({"torch.autograd.Variable", "torch.autograd.variable.Variable"})
#: The legacy CUDA tensor types, ``torch.cuda.LongTensor(data)``: calling one
#: initialises CUDA and makes a tensor on the current CUDA device. torch 2.13.0
#: ``torch/cuda/__init__.py``: ``__all__`` lists these ten ``*Tensor`` names, and
#: ``class _CudaBase`` (their base) has ``is_cuda = True`` and ``__new__ = _lazy_new``
#: (``_lazy_init()`` before the tensor is made).
LEGACY_CUDA_TENSOR_TYPES = frozenset(f"torch.cuda.{name}Tensor" for name in (
    "BFloat16", "Bool", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short"))
#: Roles of classes whose methods a framework runs with the model it trains on
#: the accelerator (when there is one): the HF ``Trainer`` moves the model to
#: ``args.device`` before training (transformers 5.24.0 trainer.py
#: ``Trainer._move_model_to_device``: ``model.to(device)``; training_args.py
#: ``_setup_devices``: ``cuda:0`` when CUDA is available), and calls its
#: ``TrainerCallback`` hooks with that model (trainer_callback.py
#: ``CallbackHandler.call_event``: ``model=self.model``).
DEVICE_PLACED_ROLES = frozenset({"hf_callback", "hf_trainer"})
#: Library functions that call the function they are given once per trial:
#: qualified name -> (keyword, position) of that argument. hyperopt 0.2.7
#: hyperopt/fmin.py ``fmin(fn, space, algo=None, max_evals=None, ...)``: its
#: ``FMinIter(...).exhaust()`` evaluates ``fn`` on each of up to ``max_evals``
#: points (``hyperopt.fmin`` is that function, re-exported by hyperopt/__init__.py).
REPEATING_DRIVER_FUNCTIONS = {"hyperopt.fmin": ("fn", 0), "hyperopt.fmin.fmin": ("fn", 0)}
#: Types of the object a study hands its objective, one per trial: optuna's
#: ``Trial`` is made by ``Study.optimize``/``Study.ask`` and "not supposed to be
#: directly instantiated" by users (optuna 5.0.0 optuna/trial/_trial.py ``Trial``;
#: re-exported as ``optuna.Trial`` by optuna/__init__.py), so a function that takes
#: one is an objective run once per trial.
TRIAL_TYPES = frozenset({"optuna.Trial", "optuna.trial.Trial", "optuna.trial._trial.Trial"})
