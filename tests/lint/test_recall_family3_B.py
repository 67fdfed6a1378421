"""Misses of the third, held-out recall family, group B (bug_103, bug_104,
bug_109, bug_110), each fixed in general in the semantic model or its rule
and checked here on code of another style than the reproducer's: every
buggy snippet is reported on its marked lines, and a correct look-alike gets
no finding of that code.

The snippets are new code written for these tests."""

from __future__ import annotations

from .test_recall_styles import assert_reported, assert_silent

# MEM305: a bound method of an in-file instance passed as ``collate_fn``, which
# builds its tensors on a device handed to it by the code that set it up
# (bug_103: ``collate_fn=batcher._batch_helper``, ``device=self.device``).

MEM305_BUG = """
    import torch
    import torch.utils.data as tud

    class TokenCollator:
        def __init__(self, vocab, target):
            self.vocab = vocab
            self.target = target

        def collate(self, rows):
            longest = max(len(r) for r in rows)
            ids = torch.empty(len(rows), longest, dtype=torch.int64, device=self.target)  # expect: MEM305
            for n, r in enumerate(rows):
                ids[n, : len(r)] = torch.tensor([self.vocab[t] for t in r])
            return ids

    def loaders(train_rows, vocab, target):
        collator = TokenCollator(vocab, target)
        return tud.DataLoader(train_rows, batch_size=16, num_workers=8, collate_fn=collator.collate)
"""

MEM305_OK = """
    import torch
    import torch.utils.data as tud

    class TokenCollator:
        def __init__(self, vocab, target):
            self.vocab = vocab
            self.target = target

        def collate(self, rows):
            longest = max(len(r) for r in rows)
            ids = torch.empty(len(rows), longest, dtype=torch.int64, device=self.target)
            mask = torch.ones(len(rows), longest, device=rows[0].device)
            return ids, mask

    def loaders(train_rows, vocab):
        collator = TokenCollator(vocab, torch.device("cpu"))
        return tud.DataLoader(train_rows, batch_size=16, num_workers=8, collate_fn=collator.collate)
"""


MEM305_OK_NO_LOADER = """
    import torch
    from torch.utils.data import Dataset

    class Windows(Dataset):
        def __init__(self, series, device):
            self.series = series
            self.device = device

        def __len__(self):
            return len(self.series) - 16

        def __getitem__(self, k):
            return torch.as_tensor(self.series[k : k + 16], device=self.device)
"""


def test_mem305_handed_device_without_a_visible_worker_loader_is_silent():
    assert_silent(MEM305_OK_NO_LOADER, "MEM305")


def test_mem305_bound_method_collate_on_handed_device():
    assert_reported(MEM305_BUG, "MEM305")


def test_mem305_bound_method_collate_on_the_cpu_is_silent():
    assert_silent(MEM305_OK, "MEM305")


# MEM401: a loop that runs a grad-disabled block on each of its elements is a
# loop of inference steps, whatever object runs them (bug_104: a TTS engine of
# another module, ``with torch.inference_mode():`` per utterance).

MEM401_BUG = """
    import gc
    import torch

    class Responder:
        def __init__(self, backend):
            self.backend = backend

        def answer_all(self, requests):
            replies = {}
            for req in requests:
                with torch.no_grad():
                    replies[req.id] = self.backend.complete(req.prompt, max_new_tokens=64)
                gc.collect()
                torch.cuda.empty_cache()  # expect: MEM401
            return replies
"""

MEM401_OK = """
    import gc
    import torch

    LIMIT = 20 * 2**30

    class Responder:
        def __init__(self, backend):
            self.backend = backend

        def answer_all(self, requests):
            replies = {}
            for req in requests:
                with torch.no_grad():
                    replies[req.id] = self.backend.complete(req.prompt, max_new_tokens=64)
                if torch.cuda.memory_reserved() > LIMIT:
                    torch.cuda.empty_cache()
            gc.collect()
            torch.cuda.empty_cache()
            return replies

        def warm_up(self, prompts):
            for prompt in prompts:
                with torch.no_grad():
                    self.backend.complete("hello", max_new_tokens=1)
                torch.cuda.empty_cache()

    def restore(net, source, snapshots):
        for key, weight in net.named_parameters():
            with torch.no_grad():
                fresh = torch.clone(source[key])
            torch.cuda.empty_cache()
        for snap in snapshots:
            with torch.no_grad():
                net.load_state_dict(torch.load(snap, map_location="cpu"))
            torch.cuda.empty_cache()
"""


def test_mem401_grad_disabled_block_per_element():
    assert_reported(MEM401_BUG, "MEM401")


def test_mem401_guarded_or_after_the_loop_is_silent():
    assert_silent(MEM401_OK, "MEM401")


# MEM306: a deep copy in a loop over a module's fixed members, inside a method
# that a training loop reaches through the file's functions; the members of an
# ``nn.ModuleList`` are where the modules given to it are (bug_109: EMA models
# copied in ``checkpoint()``, called from ``update()`` per step).

MEM306_BUG = """
    import copy
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Committee(nn.Module):
        def __init__(self, experts):
            super().__init__()
            self.experts = nn.ModuleList(experts)

        def forward(self, x):
            return sum(e(x) for e in self.experts)

        def archive(self, step):
            frozen = []
            for expert in self.experts:
                frozen.append(copy.deepcopy(expert).half())  # expect: MEM306
            torch.save(frozen, f"committee-{step}.pt")

    def maybe_archive(committee, step):
        if step % 500 == 0:
            committee.archive(step)

    def fit(loader, opt):
        committee = Committee([nn.Linear(16, 4).cuda() for _ in range(3)])
        for step, (x, y) in enumerate(loader):
            loss = F.mse_loss(committee(x.cuda()), y.cuda())
            loss.backward()
            opt.step()
            opt.zero_grad()
            maybe_archive(committee, step)
"""

MEM306_OK = """
    import copy
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Committee(nn.Module):
        def __init__(self, experts):
            super().__init__()
            self.experts = nn.ModuleList(experts)

        def forward(self, x):
            return sum(e(x) for e in self.experts)

        def archive(self, step):
            frozen = []
            for expert in self.experts:
                frozen.append(copy.deepcopy(expert).cpu())
            torch.save(frozen, f"committee-{step}.pt")

    def maybe_archive(committee, step):
        if step % 500 == 0:
            committee.archive(step)

    def fit(loader, opt):
        committee = Committee([nn.Linear(16, 4).cuda() for _ in range(3)])
        for step, (x, y) in enumerate(loader):
            loss = F.mse_loss(committee(x.cuda()), y.cuda())
            loss.backward()
            opt.step()
            opt.zero_grad()
            maybe_archive(committee, step)

    def fit_on_cpu(loader, opt):
        committee = Committee([nn.Linear(16, 4) for _ in range(3)])
        for step, (x, y) in enumerate(loader):
            F.mse_loss(committee(x), y).backward()
            opt.step()
            for expert in committee.experts:
                copy.deepcopy(expert)
"""


def test_mem306_copy_per_member_in_a_method_reached_per_step():
    assert_reported(MEM306_BUG, "MEM306")


def test_mem306_copy_taken_to_host_or_cpu_members_is_silent():
    assert_silent(MEM306_OK, "MEM306")


# MEM109: the hooked module, a module hook's first parameter, outlives the
# call, and a ``@staticmethod`` hook binds no receiver (bug_110:
# ``layer._acts.append(inputs[0].detach())`` in a static forward hook).

MEM109_BUG = """
    import torch
    import torch.nn as nn

    def stash(mod, inp, out):
        mod.cache.append(out)  # expect: MEM109

    class GradTap:
        def __init__(self, net):
            for sub in net.children():
                sub.grads = []
                sub.register_full_backward_hook(self.keep)

        @staticmethod
        def keep(module, grad_input, grad_output):
            module.grads.append(grad_output[0])  # expect: MEM109

    def instrument(net):
        net = net.cuda()
        for m in net.modules():
            m.cache = []
            m.register_forward_hook(stash)
        return GradTap(net)
"""

MEM109_OK = """
    import torch
    import torch.nn as nn

    def stash(mod, inp, out):
        mod.cache.append(out.detach().cpu())

    class GradTap:
        def __init__(self, net):
            for sub in net.children():
                sub.grads = []
                sub.register_full_backward_hook(self.keep)

        @staticmethod
        def keep(module, grad_input, grad_output):
            module.grads.append(grad_output[0])

    def reset(net):
        for block in net.children():
            block.grads.clear()

    def instrument(net):
        net = net.cuda()
        for m in net.modules():
            m.cache = []
            m.register_forward_hook(stash)
        return GradTap(net)
"""


def test_mem109_hooked_module_attribute_and_static_hook():
    assert_reported(MEM109_BUG, "MEM109")


def test_mem109_host_copies_or_cleared_storage_is_silent():
    assert_silent(MEM109_OK, "MEM109")
