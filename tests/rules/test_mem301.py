"""MEM301 no-mixed-precision: once per file, only on CUDA, silenced by any precision setting."""

from rule_helpers import lines

LOOPS = """
import torch
model = model.cuda()
def a(loader, opt):
    for x in loader:
        model(x.cuda()).backward()
        opt.step()
def b(loader, opt):
    for x in loader:
        model(x.cuda()).backward()
        opt.step()
"""


def test_reported_once_at_the_first_training_loop():
    assert lines("MEM301", LOOPS) == [6]


def test_precision_flags_silence():
    for setting in ("model.half()", "trainer = L.Trainer(precision='bf16-mixed')", "args = TrainingArguments(bf16=True)",
                    "x = x.to(torch.bfloat16)"):
        assert lines("MEM301", LOOPS + setting + "\n") == [], setting


def test_no_cuda_no_report():
    assert lines("MEM301", LOOPS.replace(".cuda()", "")) == []
