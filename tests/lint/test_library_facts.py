"""Library facts found wrong by the audit of the tables the rules rely on
(AUDIT.md of the ``audit`` branch), each checked on a small snippet: the
corrected behaviour, and a look-alike that stays silent or is reported as
before. Where the fact is one of the installed torch, it is also checked
against torch itself.

The snippets are new code written for these tests."""

from __future__ import annotations

import ast
import textwrap

import pytest

from memlint.lint.context import FileContext
from memlint.lint.semantic import frameworks, torch_ops
from memlint.lint.semantic.values import Kind

from .expectations import lint_text, parse_expectations
from .test_recall_styles import assert_reported, assert_silent


def _findings(source: str, code: str):
    source = textwrap.dedent(source)
    return [d for d in lint_text("snippet.py", source, {code}) if d.code == code]


def _severities(source: str, code: str) -> dict[int, str]:
    return {d.line: d.severity.name.lower() for d in _findings(source, code)}


def _marked(source: str, code: str) -> set[int]:
    return {line for line, c in parse_expectations(textwrap.dedent(source)).pairs() if c == code}


def _value_at(source: str, text: str):
    """The semantic model's value of the first expression spelled ``text``."""
    source = textwrap.dedent(source)
    module = ast.parse(source)
    semantic = FileContext("snippet.py", source, module).semantic
    node = next(n for n in ast.walk(module) if isinstance(n, ast.expr) and ast.unparse(n) == text)
    return semantic.value(node)


# -- MEM107: tensorboardX, mlflow and Lightning's `.experiment` convert during the call ----------
# tensorboardX 2.6.5 x2num.py ``make_np`` (``x.data.cpu().numpy()``) and mlflow's
# ``convert_metric_value_to_float_if_possible``: no graph is kept, so the finding is info
# (a device wait), not a warning (a graph kept alive).

TBX_ATTRIBUTE = """
    import tensorboardX

    class Loop:
        def __init__(self, net, opt, logdir):
            self.net, self.opt = net, opt
            self.board = tensorboardX.SummaryWriter(logdir)

        def epoch(self, batches):
            for n, (src, tgt) in enumerate(batches):
                err = ((self.net(src) - tgt) ** 2).mean()
                err.backward()
                self.opt.step()
                self.board.add_scalar("err", err, n)  # expect: MEM107
                self.board.add_scalars("errs", {"err": err * 1.0}, n)  # expect: MEM107
"""

MLFLOW_BATCH = """
    import mlflow as tracking

    def fit(net, opt, batches, crit):
        for n, (src, tgt) in enumerate(batches):
            err = crit(net(src), tgt)
            err.backward()
            opt.step()
            tracking.log_metrics({"err": err, "n": n}, step=n)  # expect: MEM107
            tracking.log_metric("err", err, step=n)  # expect: MEM107
"""

LIGHTNING_EXPERIMENT = """
    import torch
    import lightning.pytorch as pl

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            src, tgt = batch
            err = torch.nn.functional.mse_loss(self.body(src), tgt)
            self.logger.experiment.add_scalar("err", err, self.global_step)  # expect: MEM107
            return err
"""


@pytest.mark.parametrize("source", [TBX_ATTRIBUTE, MLFLOW_BATCH, LIGHTNING_EXPERIMENT],
                         ids=["tensorboardX", "mlflow", "lightning_experiment"])
def test_converting_loggers_are_info_not_warnings(source):
    severities = _severities(source, "MEM107")
    assert set(severities) == _marked(source, "MEM107")
    assert set(severities.values()) == {"info"}


def test_converting_loggers_given_numbers_stay_silent():
    assert_silent("""
        import tensorboardX
        import mlflow

        def fit(net, opt, batches, crit, logdir):
            board = tensorboardX.SummaryWriter(logdir)
            for n, (src, tgt) in enumerate(batches):
                err = crit(net(src), tgt)
                err.backward()
                board.add_scalar("err", err.item(), n)
                mlflow.log_metric("err", float(err), step=n)
    """, "MEM107")


def test_converting_logger_tables_name_the_converters():
    from rules.mem107_tensor_logged_with_graph import (
        CONVERTING_MODULE_LOGGERS, CONVERTING_WRITER_CONSTRUCTORS, MODULE_LOGGERS, WRITER_CONSTRUCTORS)

    assert WRITER_CONSTRUCTORS <= CONVERTING_WRITER_CONSTRUCTORS
    assert MODULE_LOGGERS <= CONVERTING_MODULE_LOGGERS


# -- torch.bernoulli / torch.poisson keep the graph (derivatives.yaml: zero derivative) ----------

BERNOULLI_KEPT = """
    import torch

    def rollout(states):
        policy = torch.nn.Linear(4, 1)
        draws, counts = [], []
        for s in states:
            keep = torch.bernoulli(torch.sigmoid(policy(s)))
            draws.append(keep)  # expect: MEM102
            counts.append(torch.poisson(policy(s).exp()))  # expect: MEM102
        return draws, counts
"""

MULTINOMIAL_INDICES = """
    import torch

    def rollout(states):
        policy = torch.nn.Linear(4, 3)
        picks = []
        for s in states:
            picks.append(torch.multinomial(torch.softmax(policy(s), -1), 1))
        return picks
"""


def test_bernoulli_and_poisson_draws_keep_the_graph():
    assert_reported(BERNOULLI_KEPT, "MEM102")


def test_multinomial_indices_keep_no_graph():
    assert_silent(MULTINOMIAL_INDICES, "MEM102")


@pytest.mark.parametrize("name", sorted(torch_ops.ZERO_DERIVATIVE_SAMPLERS))
def test_zero_derivative_samplers_require_grad_in_torch(name):
    torch = pytest.importorskip("torch")
    probs = torch.rand(5, requires_grad=True)
    assert getattr(torch, name)(probs).requires_grad
    assert name not in torch_ops.NONDIFFERENTIABLE


# -- torch.frexp: (mantissa, exponent), the exponent an int32 tensor ----------------------------

FREXP = """
    import torch

    def scales(batches):
        net = torch.nn.Conv2d(3, 8, 3)
        exps, mants = [], []
        for b in batches:
            parts = torch.frexp(net(b))
            exps.append(parts.exponent)
            mants.append(parts.mantissa)  # expect: MEM102
        return exps, mants
"""


def test_frexp_mantissa_keeps_the_graph_and_exponent_does_not():
    assert_reported(FREXP, "MEM102")


def test_frexp_fields_in_torch():
    torch = pytest.importorskip("torch")
    result = torch.frexp(torch.rand(3, requires_grad=True))
    fields = torch_ops.RETURN_TYPE_FIELDS["frexp"]
    assert getattr(result, fields[0]).requires_grad and not getattr(result, fields[1]).requires_grad


# -- nn.Module.compile returns None; nn.Module has no `mps` ----------------------------------------

def test_module_compile_returns_no_module():
    source = """
        import torch

        net = torch.nn.Linear(2, 2)
        done = net.compile()
        moved = net.cpu()
    """
    assert _value_at(source, "net.compile()").kind is not Kind.MODULE
    assert _value_at(source, "net.cpu()").kind is Kind.MODULE


def test_module_returning_methods_return_the_module_in_torch():
    torch = pytest.importorskip("torch")
    assert not hasattr(torch.nn.Module, "mps")
    net = torch.nn.Linear(2, 2)
    assert net.compile() is None
    assert "compile" not in torch_ops.MODULE_RETURNING_METHODS and "mps" not in torch_ops.MODULE_RETURNING_METHODS
    for name in sorted(torch_ops.MODULE_RETURNING_METHODS - {"cuda", "xpu", "to", "type", "apply", "to_empty"}):
        assert getattr(net, name)() is net, name


# -- Lightning: every validation/test/predict hook runs inside the loop's no_grad `run` ------------

CALLBACK_EVAL_EPOCH = """
    import torch
    from lightning.pytorch.callbacks import Callback

    class Preview(Callback):
        def __init__(self, probe):
            self.probe = probe

        def on_validation_epoch_end(self, trainer, pl_module):
            pl_module.eval()
            shown = pl_module(self.probe)
            trainer.logger.log_image("preview", [shown])

        def on_test_epoch_end(self, trainer, pl_module):
            pl_module.eval()
            return pl_module(self.probe)
"""

PLAIN_CLASS_EVAL = """
    import torch

    class Preview:
        def __init__(self, probe, net):
            self.probe, self.net = probe, net

        def on_validation_epoch_end(self):
            self.net.eval()
            return self.net(self.probe)  # expect: MEM104
"""


def test_lightning_callback_evaluation_hooks_run_without_grad():
    assert_silent(CALLBACK_EVAL_EPOCH, "MEM104")


def test_same_method_outside_lightning_is_still_reported():
    assert_reported(PLAIN_CLASS_EVAL, "MEM104")


def test_lightning_evaluation_hooks_are_all_disabled():
    for role in ("lightning_module", "lightning_callback"):
        for stage in ("validation", "test", "predict"):
            for when in ("batch_start", "batch_end", "epoch_start", "epoch_end"):
                hook = frameworks.hook_for(frozenset({role}), f"on_{stage}_{when}")
                if hook is not None:
                    assert hook.grad == "disabled", (role, hook.name)
    assert frameworks.hook_for(frozenset({"lightning_callback"}), "on_validation_epoch_end").grad == "disabled"
    assert frameworks.hook_for(frozenset({"lightning_module"}), "on_test_epoch_end").grad == "disabled"


# -- OOM exceptions: every name of the table exists in torch ---------------------------------------

def test_oom_error_names_resolve_in_torch():
    torch = pytest.importorskip("torch")
    for qualified in sorted(frameworks.OOM_ERRORS):
        obj = torch
        for part in qualified.split(".")[1:]:
            obj = getattr(obj, part)
        assert issubclass(obj, RuntimeError), qualified


def test_oom_retry_still_reported():
    assert_reported("""
        import torch

        def step(net, batch, opt):
            try:
                net(batch).sum().backward()
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                net(batch[: len(batch) // 2]).sum().backward()  # expect: MEM112
            opt.step()
    """, "MEM112")
