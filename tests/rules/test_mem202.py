"""MEM202 zero-grad-after-forward: what counts as the forward feeding the backward."""

from rule_helpers import lines


def test_forward_reaching_the_loss_through_several_assignments():
    found = lines("MEM202", """
        import torch.nn.functional as F
        def train(model, loader, opt):
            for x, y in loader:
                feats = model(x)
                logits = feats[:, 0]
                opt.zero_grad()
                loss = F.cross_entropy(logits, y)
                loss.backward()
                opt.step()
    """)
    assert found == [7]


def test_train_step_function_without_a_loop_is_one_iteration():
    found = lines("MEM202", """
        def train_step(model, opt, batch):
            loss = model(**batch).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    """)
    assert found == [4]


def test_forward_that_does_not_feed_the_loss_is_not_reported():
    found = lines("MEM202", """
        def train(model, loader, opt, log):
            for x, y in loader:
                log(model(x))
                opt.zero_grad()
                loss = model(x, y)
                loss.backward()
                opt.step()
    """)
    assert found == []


def test_zero_grad_after_backward_is_not_reported():
    found = lines("MEM202", """
        def train(model, loader, opt):
            for x in loader:
                loss = model(x)
                loss.backward()
                opt.zero_grad()
    """)
    assert found == []
