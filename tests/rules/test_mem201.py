"""MEM201 missing-zero-grad: loop shapes beyond the docstring examples."""

from rule_helpers import lines


def test_reported_at_the_step_of_the_innermost_training_loop_only():
    found = lines("MEM201", """
        def train(model, loader, optimizer, epochs):
            for epoch in range(epochs):
                for x in loader:
                    model(x).backward()
                    optimizer.step()
    """)
    assert found == [6]


def test_zero_grad_in_an_enclosing_loop_does_not_cover_an_inner_training_loop():
    found = lines("MEM201", """
        def train(model, loader, optimizer):
            for batch in loader:
                optimizer.zero_grad()
                for _ in range(4):
                    model(batch).backward()
                    optimizer.step()
    """)
    assert found == [7]


def test_clearing_in_a_self_method_two_calls_deep_counts():
    found = lines("MEM201", """
        class Trainer:
            def _reset(self):
                self.model.zero_grad()
            def after_step(self):
                self._reset()
            def fit(self, loader):
                for batch in loader:
                    self.model(batch).loss.backward()
                    self.optimizer.step()
                    self.after_step()
    """)
    assert found == []


def test_grad_zero_in_place_counts_as_clearing():
    found = lines("MEM201", """
        def train(model, loader, opt):
            for x in loader:
                model(x).backward()
                opt.step()
                for p in model.parameters():
                    p.grad.zero_()
    """)
    assert found == []


def test_one_of_two_optimizers_never_cleared():
    found = lines("MEM201", """
        import torch
        def train(gen, disc, loader):
            opt_g = torch.optim.Adam(gen.parameters())
            opt_d = torch.optim.Adam(disc.parameters())
            for x in loader:
                opt_d.zero_grad()
                disc(x).backward()
                opt_d.step()
                gen(x).backward()
                opt_g.step()
    """)
    assert found == [11]


def test_optimizers_cleared_through_a_loop_variable_are_not_reported():
    found = lines("MEM201", """
        def train(gen, disc, loader, opt_g, opt_d):
            for x in loader:
                for opt in (opt_g, opt_d):
                    opt.zero_grad()
                disc(x).backward()
                opt_d.step()
                opt_g.step()
    """)
    assert found == []


def test_deepspeed_engine_step_is_not_an_optimizer_step():
    found = lines("MEM201", """
        def train(model_engine, loader):
            for batch in loader:
                loss = model_engine(batch)
                model_engine.backward(loss)
                model_engine.step()
    """)
    assert found == []
