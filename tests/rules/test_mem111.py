"""MEM111 anomaly-detection-enabled: global switch, context manager, Lightning flag."""

from rule_helpers import lines


def test_switch_in_a_function_that_calls_the_training_loop():
    assert lines("MEM111", """
        import torch
        def train(model, loader, opt):
            for x in loader:
                model(x).sum().backward()
                opt.step()
        def main(model, loader, opt):
            torch.autograd.set_detect_anomaly(True)
            train(model, loader, opt)
    """) == [8]


def test_switch_in_a_file_that_does_not_train_is_silent():
    assert lines("MEM111", """
        import torch
        def configure():
            torch.autograd.set_detect_anomaly(True)
    """) == []


def test_context_in_a_lightning_training_step():
    assert lines("MEM111", """
        import torch
        import lightning as L
        class Lit(L.LightningModule):
            def training_step(self, batch, idx):
                with torch.autograd.detect_anomaly():
                    return self.net(batch).sum()
    """) == [6]


def test_test_functions_are_exempt(tmp_path):
    from memlint.lint.engine import LintOptions, lint_source
    source = "import lightning as L\ndef test_flag():\n    L.Trainer(detect_anomaly=True)\n"
    assert lint_source("test_flags.py", source.encode(), LintOptions(frozenset({"MEM111"}))).diagnostics == []


def test_lookalike_setter():
    assert lines("MEM111", """
        from mylib import set_detect_anomaly
        def train(model, loader, opt):
            set_detect_anomaly(True)
            for x in loader:
                model(x).sum().backward()
                opt.step()
    """) == []
