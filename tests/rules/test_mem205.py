"""MEM205 grad-scaler-misuse: autocast dtypes and scaler presence."""

from rule_helpers import lines

STEP = """
import torch
def step(model, x, opt):
    with {autocast}:
        loss = model(x)
    loss.backward()
    opt.step()
"""


def check(autocast: str) -> list[int]:
    return lines("MEM205", STEP.format(autocast=autocast))


def test_fp16_autocast_spellings_are_reported():
    assert check("torch.autocast('cuda')") == [6]
    assert check("torch.autocast(device_type='cuda', dtype=torch.half)") == [6]
    assert check("torch.cuda.amp.autocast()") == [6]
    assert check("torch.amp.autocast('cuda', torch.float16)") == [6]


def test_bf16_cpu_disabled_or_unknown_dtype_are_not_reported():
    assert check("torch.autocast('cuda', dtype=torch.bfloat16)") == []
    assert check("torch.autocast('cpu')") == []
    assert check("torch.autocast('cuda', enabled=False)") == []
    assert check("torch.autocast(device_type=dev)") == []
    assert check("torch.cuda.amp.autocast(dtype=torch.bfloat16)") == []


def test_a_scaler_anywhere_silences_the_fp16_half():
    source = STEP.format(autocast="torch.autocast('cuda')") + "\nscaler = torch.amp.GradScaler('cuda')\n"
    assert lines("MEM205", source) == []


def test_scaler_used_with_autocast_elsewhere_in_the_file_is_not_reported():
    source = """
        import torch
        scaler = torch.GradScaler('cuda')
        def forward(model, x):
            with torch.autocast('cuda'):
                return model(x)
        def step(model, x, opt):
            loss = model(x)
            scaler.scale(loss).backward()
    """
    assert lines("MEM205", source) == []


def test_scaler_built_but_never_used_here_is_not_reported():
    assert lines("MEM205", "import torch\nscaler = torch.cuda.amp.GradScaler()\ntrain(scaler)\n") == []
