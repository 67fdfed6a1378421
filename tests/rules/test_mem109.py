"""MEM109 hook-stores-activation: hook functions found by reference, what they keep."""

from rule_helpers import lines


def test_grad_cam_backward_hook_appending_gradients():
    assert lines("MEM109", """
        import torch
        grads = []
        def save_grad(module, grad_input, grad_output):
            g = grad_output[0]
            grads.append(g)
        def explain(model, layer, x):
            model = model.cuda()
            layer.register_full_backward_hook(save_grad)
            model(x.cuda()).max().backward()
    """) == [6]


def test_with_kwargs_forward_hook_signature():
    assert lines("MEM109", """
        import torch.nn as nn
        outs = []
        def keep(module, args, kwargs, output):
            outs.append(output)
        m = nn.Linear(2, 2).cuda()
        m.register_forward_hook(keep, with_kwargs=True)
    """) == [5]


def test_signature_that_does_not_fit_is_not_followed():
    assert lines("MEM109", """
        import torch.nn as nn
        outs = []
        def keep(output):
            outs.append(output)
        m = nn.Linear(2, 2).cuda()
        m.register_forward_hook(keep)
    """) == []


def test_cpu_only_file_is_silent():
    assert lines("MEM109", """
        import torch.nn as nn
        outs = []
        def keep(module, inputs, output):
            outs.append(output)
        m = nn.Linear(2, 2)
        m.register_forward_hook(keep)
    """) == []


def test_register_hook_of_another_library():
    assert lines("MEM109", """
        import torch
        import pluggy
        seen = []
        pm = pluggy.PluginManager("x")
        torch.cuda.init()
        pm.register_hook(lambda event: seen.append(event))
    """) == []


def test_cleared_container_is_bounded():
    assert lines("MEM109", """
        import torch.nn as nn
        outs = []
        def keep(module, inputs, output):
            outs.append(output)
        m = nn.Linear(2, 2).cuda()
        m.register_forward_hook(keep)
        def step(x):
            m(x)
            outs.clear()
    """) == []


def test_needs_names_cover_every_registration():
    from memlint.rules.mem109_hook_stores_activation import GLOBAL_HOOKS, MODULE_HOOKS, HookStoresActivation
    wanted = {*MODULE_HOOKS, "register_hook", *(q.rsplit(".", 1)[1] for q in GLOBAL_HOOKS)}
    assert wanted == set(HookStoresActivation.NEEDS_NAMES)
