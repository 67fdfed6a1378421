"""MEM304 dataset-on-device: the shapes it reports and the ones it leaves alone."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM304"

REPORTED = {
    "dataset_init_cuda_via_local": (
        "import torch\nfrom torch.utils.data import Dataset\nclass Frames(Dataset):\n    def __init__(self, arr):\n"
        "        t = torch.from_numpy(arr)\n        self.frames = t.cuda()  # expect: MEM304\n"
    ),
    "iterable_dataset_device_factory": (
        "import torch\nimport torch.utils.data as D\nclass S(D.IterableDataset):\n    def __init__(self, n, device):\n"
        "        self.table = torch.randn(n, 16, device=device)\n        self.samples = torch.as_tensor(raw, device=device)  # expect: MEM304\n"
    ),
    "name_ending_dataset_list_of_tensors": (
        "import torch\nclass AudioStore:\n    def __init__(self, clips):\n        self.clips = [torch.as_tensor(c).cuda() for c in clips]  # expect: MEM304\n"
        "    def __getitem__(self, i):\n        return self.clips[i]\n"
    ),
    "module_level_iterated_by_split": (
        "import torch\nX = torch.as_tensor(arr).to('cuda')  # expect: MEM304\nfor xb in X.split(64):\n    model(xb)\n"
    ),
    "tensor_dataset_argument": (
        "import torch\nfrom torch.utils.data import TensorDataset\nds = TensorDataset(torch.tensor(x).cuda())  # expect: MEM304\n"
    ),
}

SILENT = {
    "not_a_dataset_class": "import torch\nclass Cache:\n    def __init__(self, x):\n        self.x = torch.as_tensor(x).cuda()\n",
    "dataset_getitem_moves_one_sample": "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __getitem__(self, i):\n        self.last = self.x[i].cuda()\n        return self.last\n",
    "literal_constant": "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __init__(self):\n        self.offsets = torch.tensor([1, 2, 3]).cuda()\n",
    "model_in_dataset": "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __init__(self, model):\n        self.feature_model = model.cuda()\n    def __getitem__(self, i):\n        return self.feature_model(self.x[i])\n",
    "module_level_used_once": "import torch\nX = torch.as_tensor(arr).cuda()\nprint(model(X))\n",
    "moved_per_batch": "import torch\ndef f(model, loader, device):\n    for x in loader:\n        x = x.to(device)\n        model(x)\n",
    "cpu_explicit": "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __init__(self, x):\n        self.x = torch.as_tensor(x).to('cpu')\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []
