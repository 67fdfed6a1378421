"""MEM402 cudnn-benchmark-with-dynamic-shapes."""

from __future__ import annotations

import ast

from memlint.lint.names import targets_of
from memlint.lint.diagnostic import Severity
from memlint.lint.patterns import names_in
from memlint.lint.rule import Rule
from memlint.lint.syntax import call_arguments, is_constant, keyword_arg
from memlint.rules._training import calls_in, walk

BENCHMARK_FLAG = "torch.backends.cudnn.benchmark"
#: Resizing calls whose output shape follows their arguments.
_RESIZERS = frozenset({"interpolate", "upsample", "resize", "Resize", "Upsample"})
#: Transforms whose output size varies from sample to sample or batch to batch (torchvision v2,
#: DETR/detectron2-style multi-scale augmentation).
_VARIABLE_SIZE_TRANSFORMS = frozenset({"RandomResize", "RandomShortestSize", "ResizeShortestEdge", "RandomScale", "ScaleJitter", "RandomSizeCrop"})
_PAD_TO_LONGEST = frozenset({"torch.nn.utils.rnn.pad_sequence"})
_PADDING_COLLATORS = frozenset({"DataCollatorWithPadding", "DataCollatorForSeq2Seq", "DataCollatorForTokenClassification"})
_RANDOM_MODULES = ("random.", "numpy.random.", "torch.randint", "torch.rand", "torch.randn")


class CudnnBenchmarkWithDynamicShapes(Rule):
    """## What it does
    Reports `torch.backends.cudnn.benchmark = True` (any import spelling) in
    a file whose input shapes visibly vary: a resize or `interpolate` whose
    size or scale factor is random, a variable-size transform
    (`RandomResize`, `RandomShortestSize`, `ResizeShortestEdge`,
    `ScaleJitter`), `pad_sequence` or a tokenizer/collator padding each batch
    to its longest member. The evidence is named in the message. Off by
    default: enable with `--extend-select MEM402`.

    ## Why is this bad?
    With `benchmark = True`, cuDNN times every candidate convolution
    algorithm the first time it sees an input shape and caches the winner.
    When shapes change every batch, that search (slow, and each candidate's
    workspace allocated, up to gigabytes) runs again and again: steps are
    slower and memory peaks higher than without benchmarking, and the
    allocator's cache fills with odd-sized workspace blocks.

    ## Example
    ```python
    torch.backends.cudnn.benchmark = True
    for images, targets in loader:
        size = random.choice([480, 512, 544, 576, 608])
        images = F.interpolate(images, size=size)
    ```

    ## Use instead
    ```python
    torch.backends.cudnn.benchmark = False  # shapes vary: no per-shape search
    for images, targets in loader:
        size = random.choice([480, 512, 544, 576, 608])
        images = F.interpolate(images, size=size)
    ```

    ## Known problems
    Shapes varying through data the linter cannot see (a dataset of images of
    different sizes with no resize, a sampler) are not detected.
    `RandomResizedCrop` is not evidence: it resizes to a fixed output size.
    When the sizes come from a small fixed set, benchmarking each of them
    once can still pay off: that is why the rule is off by default.

    ## References
    - [torch.backends.cudnn.benchmark](https://pytorch.org/docs/stable/backends.html#torch.backends.cudnn.benchmark)
    - [Performance tuning guide: enable cuDNN auto-tuner](https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html)
    """

    CODE = "MEM402"
    NAME = "cudnn-benchmark-with-dynamic-shapes"
    MESSAGE = "`cudnn.benchmark = True` with input shapes that vary: a new algorithm search and workspace for every shape"
    SEVERITY = Severity.WARNING
    DEFAULT_ENABLED = False
    TRIGGERS = ("benchmark",)
    NEEDS_NAMES = ("benchmark",)
    FRAMEWORK = "torch"
    VALID = (
        "import torch\nimport torchvision.transforms as T\ntorch.backends.cudnn.benchmark = True\ntf = T.Compose([T.RandomResizedCrop(224), T.ToTensor()])\n",
        "import torch\nimport random\nimport torch.nn.functional as F\ntorch.backends.cudnn.benchmark = False\ndef aug(x):\n    return F.interpolate(x, scale_factor=random.uniform(0.5, 1.5))\n",
        "import torch\nimport torch.nn.functional as F\ntorch.backends.cudnn.benchmark = True\ndef up(x):\n    return F.interpolate(x, scale_factor=2)\n",
        "import torch\nfrom torch.nn.utils.rnn import pad_sequence\nbenchmark = True\ndef collate(b):\n    return pad_sequence(b)\n",
    )
    INVALID = (
        "import torch\nimport random\nimport torch.nn.functional as F\ntorch.backends.cudnn.benchmark = True  # expect: MEM402\ndef aug(x):\n    return F.interpolate(x, scale_factor=random.uniform(0.5, 1.5))\n",
        "import random\nfrom torch.backends import cudnn\nfrom torch.nn import functional as F\ncudnn.benchmark = True  # expect: MEM402\nfor imgs in loader:\n    sz = random.randrange(320, 640, 32)\n    imgs = F.interpolate(imgs, size=[sz, sz])\n",
        "import torch.backends.cudnn as cudnn\nfrom torch.nn.utils.rnn import pad_sequence\ndef main():\n    cudnn.benchmark = True  # expect: MEM402\ndef collate(batch):\n    return pad_sequence([b[0] for b in batch], batch_first=True)\n",
        "import torch\nimport transforms as T\ntorch.backends.cudnn.benchmark = True  # expect: MEM402\ntrain_tf = T.Compose([T.RandomResize([480, 512, 544, 576], max_size=1333)])\n",
    )

    def visit_Assign(self, node: ast.Assign) -> None:
        if not is_constant(node.value, True):
            return
        if not any(self.ctx.qualified(target) == BENCHMARK_FLAG for target in node.targets):
            return
        evidence = self._dynamic_shape_evidence()
        if evidence is not None:
            self.report(node, message=f"{self.MESSAGE} (`{evidence}`)")

    def _dynamic_shape_evidence(self) -> str | None:
        if not hasattr(self, "_evidence"):
            self._evidence = self._find_evidence()
        return self._evidence

    def _find_evidence(self) -> str | None:
        bodies = [self.ctx.module, *self.ctx.semantic.functions]
        calls = [call for body in bodies for call in calls_in(body)]
        random_names = self._random_names(bodies)
        for call in calls:
            qualified = self.ctx.qualified(call.func) or ""
            last = qualified.split(".")[-1]
            if qualified in _PAD_TO_LONGEST or last in _VARIABLE_SIZE_TRANSFORMS:
                return self._short(call)
            if last in _RESIZERS and self._random_argument(call, random_names):
                return self._short(call)
            if last in _PADDING_COLLATORS and not self._fixed_padding(call, default_longest=True):
                return self._short(call)
            if "tokenizer" in qualified.lower() and self._pads_to_longest(call):
                return self._short(call)
        return None

    def _short(self, call: ast.Call) -> str:
        text = " ".join(self.ctx.code(call).split())
        return text if len(text) <= 60 else text[:57] + "..."

    def _is_random_call(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and (self.ctx.qualified(node.func) or "").startswith(_RANDOM_MODULES)

    def _random_names(self, bodies) -> set[str]:
        """Names assigned from a random call, or from names so assigned (three steps deep)."""
        assignments = [node for body in bodies for node in walk(body) if isinstance(node, ast.Assign)]
        names: set[str] = set()
        for _ in range(3):
            for node in assignments:
                if any(self._is_random_call(n) for n in walk(node.value)) or names_in(node.value) & names:
                    names.update(name for target in node.targets for name in targets_of(target))
        return names

    def _random_argument(self, call: ast.Call, random_names: set[str]) -> bool:
        for value in _size_arguments(call):
            if any(self._is_random_call(n) for n in walk(value)) or names_in(value) & random_names:
                return True
        return False

    def _fixed_padding(self, call: ast.Call, default_longest: bool) -> bool:
        padding = keyword_arg(call, "padding")
        if padding is None:
            return not default_longest
        if isinstance(padding.value, ast.Constant) and isinstance(padding.value.value, (str, bytes)):
            return padding.value.value in ("max_length", "do_not_pad")
        return not is_constant(padding.value, True)

    def _pads_to_longest(self, call: ast.Call) -> bool:
        if keyword_arg(call, "padding") is None:
            return False
        return not self._fixed_padding(call, default_longest=False)


def _size_arguments(call: ast.Call) -> list[ast.expr]:
    """The arguments of a resizing call but the first when it is passed
    without a name (the input being resized)."""
    arguments = call_arguments(call)
    input_first = bool(call.args) or (bool(call.keywords) and call.keywords[0].arg is None)
    return arguments[1:] if input_first else arguments
