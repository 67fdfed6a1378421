"""MEM104 misses of the thirteenth, held-out recall family (/work/family13
bug_340, bug_341), each fixed by what the values are, and checked on code of
another style than the recall case: every buggy snippet is reported on its
marked lines, and a correct look-alike gets no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

from .test_recall_styles import assert_reported, assert_silent

# -- bug_340: a script's ``__main__`` block switches the net to eval mode and
# calls a helper per image of a directory; the helper runs the forward pass.
# The top level has no function to decorate, so the helper is the evaluation
# and is reported at its own forward (per-function scoring counts the
# helper). Here the driver is plain module-level code looping over a glob of
# files, and the helper takes the model as a keyword argument.

SCRIPT_HELPER_BUG = """
    import glob

    import torch
    from torch import nn

    def denoise(path, *, model):
        frame = torch.load(path, map_location="cpu").unsqueeze(0)
        cleaned = model(frame)  # expect: MEM104
        torch.save(cleaned.squeeze(0).cpu(), path + ".clean")

    unet = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1))
    unet.load_state_dict(torch.load("unet.pt", map_location="cpu"))
    unet.eval()
    for frame_path in glob.glob("frames/*.pt"):
        denoise(frame_path, model=unet)
"""

SCRIPT_HELPER_OK = """
    import glob

    import torch
    from torch import nn

    @torch.inference_mode()
    def denoise(path, *, model):
        frame = torch.load(path, map_location="cpu").unsqueeze(0)
        cleaned = model(frame)
        torch.save(cleaned.squeeze(0).cpu(), path + ".clean")

    unet = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 3, padding=1))
    unet.load_state_dict(torch.load("unet.pt", map_location="cpu"))
    unet.eval()
    for frame_path in glob.glob("frames/*.pt"):
        denoise(frame_path, model=unet)
"""


def test_mem104_helper_of_a_script_evaluation_is_reported_in_the_helper():
    assert_reported(SCRIPT_HELPER_BUG, "MEM104")


def test_mem104_decorated_helper_of_a_script_evaluation_is_silent():
    assert_silent(SCRIPT_HELPER_OK, "MEM104")


# -- bug_341: a trainer class's ``test(self, epoch)`` method forwards the model
# over the test loader with no ``model.eval()`` and no ``no_grad``; the file
# never calls it. Here the trainer is a dataclass-style holder whose
# evaluation method walks a list of batches with ``enumerate`` and a tuple
# unpacking, the model on ``self.net``.

TRAINER_METHOD_BUG = """
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Runner:
        def __init__(self, net: nn.Module, batches, holdout=None):
            self.net = net.cuda()
            self.batches, self.holdout = batches, holdout
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

        def fit_epoch(self):
            for x, y in self.batches:
                self.opt.zero_grad()
                F.cross_entropy(self.net(x.cuda()), y.cuda()).backward()
                self.opt.step()

        def score(self):
            hits = 0
            for step, (x, y) in enumerate(self.holdout):
                x, y = x.cuda(), y.cuda()
                hits += (self.net(x).argmax(1) == y).sum().item()  # expect: MEM104
            return hits
"""

TRAINER_METHOD_OK = """
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Runner:
        def __init__(self, net: nn.Module, batches, holdout=None):
            self.net = net.cuda()
            self.batches, self.holdout = batches, holdout
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

        def fit_epoch(self):
            for x, y in self.batches:
                self.opt.zero_grad()
                F.cross_entropy(self.net(x.cuda()), y.cuda()).backward()
                self.opt.step()

        def score(self):
            hits = 0
            with torch.no_grad():
                for step, (x, y) in enumerate(self.holdout):
                    x, y = x.cuda(), y.cuda()
                    hits += (self.net(x).argmax(1) == y).sum().item()
            return hits
"""

# A method of the same trainer that forwards per batch and backpropagates
# the result itself is training, not an evaluation.
TRAINER_SECOND_TRAINING_METHOD_OK = """
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Runner:
        def __init__(self, net: nn.Module, batches, extra=None):
            self.net = net.cuda()
            self.batches, self.extra = batches, extra
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

        def fit_epoch(self):
            for x, y in self.batches:
                self.opt.zero_grad()
                F.cross_entropy(self.net(x.cuda()), y.cuda()).backward()
                self.opt.step()

        def finetune(self):
            for x, y in self.extra:
                x, y = x.cuda(), y.cuda()
                self.opt.zero_grad()
                F.cross_entropy(self.net(x), y).backward()
                self.opt.step()
"""


def test_mem104_trainer_evaluation_method_is_reported():
    assert_reported(TRAINER_METHOD_BUG, "MEM104")


def test_mem104_trainer_evaluation_method_under_no_grad_is_silent():
    assert_silent(TRAINER_METHOD_OK, "MEM104")


def test_mem104_trainer_second_training_method_is_silent():
    assert_silent(TRAINER_SECOND_TRAINING_METHOD_OK, "MEM104")
