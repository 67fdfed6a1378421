"""MEM308 dataloader-worker-copy-on-read: the file must fork workers, the attribute must be read per sample."""

from rule_helpers import lines

DATASET = """
    import json
    from torch.utils.data import Dataset, DataLoader
    class D(Dataset):
        def __init__(self, p):
            self.items = json.load(open(p))
        def __getitem__(self, i):
            return self.items[i]
"""


def test_workers_from_a_variable_count():
    assert lines("MEM308", DATASET + "    loader = DataLoader(D('a'), num_workers=n)\n") == [6]


def test_no_dataloader_in_the_file_is_silent():
    assert lines("MEM308", DATASET) == []


def test_zero_workers_is_silent():
    assert lines("MEM308", DATASET + "    loader = DataLoader(D('a'), num_workers=0)\n") == []


def test_lookalike_dataloader():
    assert lines("MEM308", DATASET.replace("from torch.utils.data import Dataset, DataLoader",
                                           "from torch.utils.data import Dataset\n    from mylib import DataLoader")
                 + "    loader = DataLoader(D('a'), num_workers=4)\n") == []


def test_class_that_is_no_dataset():
    assert lines("MEM308", DATASET.replace("class D(Dataset):", "class D:")
                 + "    loader = DataLoader(range(3), num_workers=4)\n") == []
