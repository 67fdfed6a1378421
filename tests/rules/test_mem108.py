"""MEM108 module-stores-forward-output: what a forward pass keeps on the module."""

from rule_helpers import lines


def test_growing_list_on_the_module():
    assert lines("MEM108", """
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Conv2d(3, 8, 3)
                self.maps = []
            def forward(self, x):
                y = self.body(x)
                self.maps.append(y)
                return y
    """) == [10]


def test_method_reached_from_forward_through_an_in_file_base():
    assert lines("MEM108", """
        import torch.nn as nn
        class Base(nn.Module):
            def _keep(self, h):
                self.kept = h * 2
                return h
        class Net(Base):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)
            def forward(self, x):
                return self._keep(self.fc(x))
    """) == [5]


def test_method_not_called_by_forward_is_not_a_forward_pass():
    assert lines("MEM108", """
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)
            def forward(self, x):
                return self.fc(x)
            def probe(self, x):
                self.kept = self.fc(x)
                return self.kept
    """) == []


def test_lightning_step_is_left_to_mem102():
    assert lines("MEM108", """
        import lightning as L
        class Lit(L.LightningModule):
            def training_step(self, batch, idx):
                loss = self.net(batch).sum()
                self.last_out = self.net(batch)
                return loss
    """) == []


def test_grad_disabled_forward_by_decorator():
    assert lines("MEM108", """
        import torch
        import torch.nn as nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)
                self.seen = []
            @torch.no_grad()
            def forward(self, x):
                y = self.fc(x)
                self.seen.append(y)
                return y
    """) == []


def test_lookalike_class_without_module_base():
    assert lines("MEM108", """
        class Net:
            def __init__(self, fc):
                self.fc = fc
                self.seen = []
            def forward(self, x):
                y = self.fc(x)
                self.seen.append(y)
                return y
    """) == []
