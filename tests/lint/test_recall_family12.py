"""Misses of the twelfth, held-out recall family (fixtures/recall
bug_314..bug_335, ok_84..ok_89), each fixed by what the values are, and
checked on code of another style than the recall case: every buggy snippet
is reported on its marked lines, and a correct look-alike gets no finding of
that code.

The snippets are new code written for these tests."""

from __future__ import annotations

from .test_recall_styles import assert_reported, assert_silent

# -- MEM201 miss (bug_330): aihwkit's ``AnalogSGD``/``AnalogAdam`` are torch's
# SGD/Adam with an analog mixin (IBM/aihwkit aihwkit/optim/analog_optimizer.py):
# optimizers whose gradients accumulate until ``zero_grad``. bug_330 steps one
# at module level; here a trainer function imports the module and steps
# ``AnalogAdam`` through an alias.

MEM201_ANALOG_BUG = """
    import torch
    import aihwkit.optim as aopt

    def fit(model, loader, epochs):
        optimizer = aopt.AnalogAdam(model.parameters(), lr=1e-3)
        for _ in range(epochs):
            for x, y in loader:
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()  # expect: MEM201
"""

MEM201_ANALOG_OK = """
    import torch
    import aihwkit.optim as aopt

    def fit(model, loader, epochs):
        optimizer = aopt.AnalogAdam(model.parameters(), lr=1e-3)
        for _ in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
"""


def test_mem201_analog_optimizer_never_zeroed():
    assert_reported(MEM201_ANALOG_BUG, "MEM201")


def test_mem201_analog_optimizer_zeroed_is_silent():
    assert_silent(MEM201_ANALOG_OK, "MEM201")


# -- MEM103 miss (bug_332): a sentence-transformers model's ``encode`` runs its
# forward pass (under no_grad, sentence_transformers/SentenceTransformer.py
# ``encode``), so a loop that encodes each chunk of a stream walks the data;
# with ``convert_to_tensor=True`` each result stays on the model's device.
# bug_332 keeps the results on ``self`` in an indexer class; here a function
# collects them in a local list over a loader.

MEM103_ENCODE_BUG = """
    import torch
    from sentence_transformers import SentenceTransformer

    def embed_corpus(loader):
        encoder = SentenceTransformer("all-MiniLM-L6-v2", device="cuda")
        vectors = []
        for texts in loader:
            vectors.append(encoder.encode(texts, convert_to_tensor=True))  # expect: MEM103
        return torch.cat(vectors)
"""

MEM103_ENCODE_OK = """
    import torch
    from sentence_transformers import SentenceTransformer

    def embed_corpus(loader):
        encoder = SentenceTransformer("all-MiniLM-L6-v2", device="cuda")
        vectors = []
        for texts in loader:
            vectors.append(encoder.encode(texts, convert_to_tensor=True).cpu())
        return torch.cat(vectors)
"""


def test_mem103_encoded_chunks_kept_on_the_device():
    assert_reported(MEM103_ENCODE_BUG, "MEM103")


def test_mem103_encoded_chunks_moved_to_the_host_are_silent():
    assert_silent(MEM103_ENCODE_OK, "MEM103")


# -- MEM104 miss (bug_316): a helper that switches the model to eval mode and
# runs one forward pass, with no loop of its own, called by the script for
# every input. The loop over inputs is a run loop when its item, through a
# library call the model cannot trace (``cv2.imread(path)``), feeds a call
# that runs a forward pass. Here: a method-less captioning script that reads
# each file with PIL and passes the result on under another name.

MEM104_PER_INPUT_HELPER_BUG = """
    import os
    import torch
    from PIL import Image
    from torchvision import transforms
    from captioner import Captioner

    def caption(model, picture):
        model.eval()
        batch = transforms.ToTensor()(picture).unsqueeze(0).cuda()
        return model(batch).argmax(-1).tolist()  # expect: MEM104

    def main(folder):
        model = Captioner()
        model.load_state_dict(torch.load("captioner.pt", map_location="cpu"))
        model.cuda()
        for name in os.listdir(folder):
            picture = Image.open(os.path.join(folder, name)).convert("RGB")
            print(name, caption(model, picture))
"""

MEM104_PER_INPUT_HELPER_OK = MEM104_PER_INPUT_HELPER_BUG.replace(
    "        for name in os.listdir(folder):", "        with torch.inference_mode():\n            for name in os.listdir(folder):").replace(
    "            picture = Image", "                picture = Image").replace("            print(name", "                print(name")


def test_mem104_helper_called_for_every_input_runs_with_autograd():
    assert_reported(MEM104_PER_INPUT_HELPER_BUG, "MEM104")


def test_mem104_helper_called_under_inference_mode_is_silent():
    assert "inference_mode" in MEM104_PER_INPUT_HELPER_OK
    assert_silent(MEM104_PER_INPUT_HELPER_OK, "MEM104")
