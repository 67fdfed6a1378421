"""MEM305 cuda-in-dataloader-worker: the shapes it reports and the ones it leaves alone."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM305"

REPORTED = {
    "getitem_cuda_alias_base": "import torch\nimport torch.utils.data as tud\nclass D(tud.Dataset):\n    def __getitem__(self, i):\n        return self.x[i].cuda()  # expect: MEM305\n",
    "helper_called_from_getitem": (
        "import torch\nfrom torch.utils.data import Dataset\ndef load(p):\n    return torch.load(p, map_location='cuda:0').to('cuda')  # expect: MEM305\n"
        "class D(Dataset):\n    def __getitem__(self, i):\n        return load(self.paths[i])\n"
    ),
    "lambda_collate": "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(ds, num_workers=2, collate_fn=lambda b: torch.stack(b).cuda())  # expect: MEM305\n",
    "partial_collate_device_param_default": (
        "import functools, torch\nfrom torch.utils.data import DataLoader\ndef collate(b, device='cuda'):\n    return torch.stack(b).to(device)  # expect: MEM305\n"
        "loader = DataLoader(ds, num_workers=4, collate_fn=functools.partial(collate))\n"
    ),
    "worker_init_cuda_api": "import torch\nfrom torch.utils.data import DataLoader\ndef init(wid):\n    torch.cuda.set_device(0)  # expect: MEM305\nDataLoader(ds, num_workers=1, worker_init_fn=init)\n",
    "self_device_cuda": (
        "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __init__(self):\n        self.device = torch.device('cuda')\n"
        "    def __getitem__(self, i):\n        return torch.ones(2, device=self.device)  # expect: MEM305\n"
    ),
}

SILENT = {
    "main_process_default_workers": "import torch\nfrom torch.utils.data import DataLoader\ndef c(b):\n    return torch.stack(b).cuda()\nDataLoader(ds, collate_fn=c)\n",
    "dataset_only_loaded_with_zero_workers": "import torch\nfrom torch.utils.data import Dataset, DataLoader\nclass D(Dataset):\n    def __getitem__(self, i):\n        return self.x[i].cuda()\nds = D()\nDataLoader(ds, num_workers=0)\n",
    "unknown_device": "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __getitem__(self, i):\n        return self.x[i].to(self.device)\n",
    "is_available_check": "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __getitem__(self, i):\n        return torch.cuda.is_available()\n",
    "len_is_not_a_worker_method": "import torch\nfrom torch.utils.data import Dataset\nclass D(Dataset):\n    def __init__(self, x):\n        self.n = torch.tensor(len(x)).cuda()\n",
    "not_torch_dataloader": "import torch\nfrom mylib import DataLoader\ndef c(b):\n    return b.cuda()\nDataLoader(ds, collate_fn=c, num_workers=4)\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []
