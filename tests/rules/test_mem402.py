"""MEM402 cudnn-benchmark-with-dynamic-shapes: the evidence of varying shapes."""

from rule_helpers import lines

HEAD = "import random\nimport torch\nimport torch.nn.functional as F\ntorch.backends.cudnn.benchmark = True\n"


def test_random_size_reaching_interpolate_through_names():
    assert lines("MEM402", HEAD + "s = random.choice([320, 416, 512])\nsize = (s, s)\ny = F.interpolate(x, size=size)\n") == [4]


def test_tokenizer_padding_to_longest():
    assert lines("MEM402", HEAD + "enc = tokenizer(texts, padding=True, return_tensors='pt')\n") == [4]
    assert lines("MEM402", HEAD + "enc = tokenizer(texts, padding='max_length', max_length=64)\n") == []


def test_benchmark_false_or_fixed_interpolation_is_not_reported():
    assert lines("MEM402", HEAD.replace("True", "False") + "y = F.interpolate(x, scale_factor=random.random())\n") == []
    assert lines("MEM402", HEAD + "y = F.interpolate(x, size=(224, 224))\n") == []


def test_off_by_default():
    from memlint.lint.registry import rule_index

    assert rule_index()["MEM402"].default_enabled is False
