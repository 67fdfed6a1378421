"""MEM306 model-copy-on-device: where the copy runs, what is copied, where it lives."""

from rule_helpers import lines


def test_copy_in_a_function_called_from_the_epoch_loop():
    assert lines("MEM306", """
        import copy
        import torch.nn as nn
        def snapshot(model):
            return copy.deepcopy(model)
        def fit(loader, opt, epochs):
            model = nn.Linear(4, 2).to("cuda")
            for epoch in range(epochs):
                for x in loader:
                    model(x).sum().backward()
                    opt.step()
                best = snapshot(model)
    """) == [5]


def test_helper_called_once_is_not_reported():
    assert lines("MEM306", """
        import copy
        import torch.nn as nn
        def snapshot(model):
            return copy.deepcopy(model)
        def main():
            model = nn.Linear(4, 2).to("cuda")
            frozen = snapshot(model)
    """) == []


def test_copy_of_a_module_from_another_file_is_silent():
    assert lines("MEM306", """
        import copy
        def fit(model, loader, opt, epochs):
            for epoch in range(epochs):
                for x in loader:
                    model(x).sum().backward()
                    opt.step()
                best = copy.deepcopy(model)
    """) == []


def test_copy_in_a_test_function_is_not_reported(tmp_path):
    from memlint.lint.engine import LintOptions, lint_source
    source = (
        "import copy\nimport torch.nn as nn\n"
        "def test_copies(loader, opt):\n"
        "    model = nn.Linear(4, 2).cuda()\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
        "        ref = copy.deepcopy(model)\n"
    )
    result = lint_source("test_model.py", source.encode(), LintOptions(frozenset({"MEM306"})))
    assert [d.line for d in result.diagnostics] == []
    result = lint_source("train.py", source.encode(), LintOptions(frozenset({"MEM306"})))
    assert [d.line for d in result.diagnostics] == [8]


def test_deepcopy_lookalike():
    assert lines("MEM306", """
        import torch.nn as nn
        from mylib import deepcopy
        def fit(loader, opt, epochs):
            model = nn.Linear(4, 2).cuda()
            for epoch in range(epochs):
                for x in loader:
                    model(x).sum().backward()
                    opt.step()
                best = deepcopy(model)
    """) == []
