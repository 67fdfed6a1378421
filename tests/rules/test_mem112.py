"""MEM112 retry-inside-oom-handler: which handlers catch an OOM, what counts as a retry."""

from rule_helpers import lines


def test_tuple_of_exceptions_with_the_oom_error():
    assert lines("MEM112", """
        import torch
        def step(model, x):
            model = model.cuda().train()
            try:
                model(x).sum().backward()
            except (ValueError, torch.OutOfMemoryError):
                model(x[:1]).sum().backward()
    """) == [8]


def test_library_oom_predicate():
    assert lines("MEM112", """
        import torch
        from lightning.pytorch.utilities.memory import is_oom_error
        def step(model, x):
            model = model.cuda().train()
            try:
                return model(x)
            except RuntimeError as e:
                if is_oom_error(e):
                    return model(x[:1])
                raise
    """) == [10]


def test_other_exception_is_not_an_oom():
    assert lines("MEM112", """
        import torch
        def step(model, x):
            model = model.cuda().train()
            try:
                return model(x)
            except ValueError:
                return model(x[:1])
    """) == []


def test_lookalike_exception_of_another_library():
    assert lines("MEM112", """
        import torch
        from mylib import OutOfMemoryError
        def step(model, x):
            model = model.cuda().train()
            try:
                return model(x)
            except OutOfMemoryError:
                return model(x[:1])
    """) == []


def test_long_try_block_does_not_match_helper_calls():
    assert lines("MEM112", """
        import torch
        def search(trainer, run, shrink, log):
            size = 64
            while size > 1:
                try:
                    log("trying", size)
                    run(trainer, size)
                    size = shrink(size, 2.0)
                except torch.cuda.OutOfMemoryError:
                    log("oom", size)
                    size = shrink(size, 0.5)
    """) == []
