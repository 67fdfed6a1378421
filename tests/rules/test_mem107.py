"""MEM107 tensor-logged-with-graph: the shapes it reports and the ones it leaves alone."""

import pytest
from _marks import assert_matches_markers, reported_lines

CODE = "MEM107"
TRAIN = "    for i, (x, y) in enumerate(loader):\n        loss = crit(model(x), y)\n        loss.backward()\n"

REPORTED = {
    "wandb_alias_nested_dict": "import wandb as wb\ndef f(model, loader, crit):\n" + TRAIN + "        wb.log({'train': {'loss': loss}}, step=i)  # expect: MEM107\n",
    "wandb_run_object": "import wandb\nrun = wandb.init()\ndef f(model, loader, crit):\n" + TRAIN + "        run.log({'loss': loss * 2})  # expect: MEM107\n",
    "summary_writer_self_attribute": (
        "from torch.utils.tensorboard import SummaryWriter\nclass T:\n    def __init__(self):\n        self.tb = SummaryWriter()\n"
        "    def fit(self, model, loader, crit):\n" + TRAIN.replace("    ", "        ", 1).replace("\n        ", "\n            ")
        + "            self.tb.add_scalar('loss', loss, i)  # expect: MEM107\n"
    ),
    "writer_parameter_annotated": "from torch.utils.tensorboard import SummaryWriter\ndef f(model, loader, crit, writer: SummaryWriter):\n" + TRAIN + "        writer.add_scalar('loss', loss, i)  # expect: MEM107\n",
    "mlflow_from_import": "from mlflow import log_metric\ndef f(model, loader, crit):\n" + TRAIN + "        log_metric('loss', loss)  # expect: MEM107\n",
    "metrics_dict_update": "import wandb\ndef f(model, loader, crit):\n" + TRAIN + "        logs = {}\n        logs.update({'loss': loss})\n        wandb.log(logs)  # expect: MEM107\n",
}

SILENT = {
    "item": "import wandb\ndef f(model, loader, crit):\n" + TRAIN + "        wandb.log({'loss': loss.item()})\n",
    "detach": "import mlflow\ndef f(model, loader, crit):\n" + TRAIN + "        mlflow.log_metric('loss', loss.detach())\n",
    "lightning_self_log": "class M:\n    def training_step(self, b, i):\n        loss = self.model(b).loss\n        self.log('loss', loss)\n        self.log_dict({'loss': loss})\n        return loss\n",
    "unknown_logger_object": "import wandb\ndef f(model, loader, crit, logger):\n" + TRAIN + "        logger.log({'loss': loss})\n",
    "writer_parameter_of_unknown_type": "from torch.utils.tensorboard import SummaryWriter\ndef f(model, loader, crit, writer):\n" + TRAIN + "        writer.add_scalar('loss', loss, i)\n",
    "no_grad": "import torch, wandb\ndef f(model, loader, crit):\n    with torch.no_grad():\n        for x, y in loader:\n            wandb.log({'val': crit(model(x), y)})\n",
    "tag_is_not_the_value": "from torch.utils.tensorboard import SummaryWriter\nw = SummaryWriter()\ndef f(model, loader, crit):\n" + TRAIN + "        w.add_scalar(str(loss.item()), 1.0, i)\n",
}


@pytest.mark.parametrize("source", REPORTED.values(), ids=REPORTED.keys())
def test_reported_shapes(source):
    assert_matches_markers(CODE, source)


@pytest.mark.parametrize("source", SILENT.values(), ids=SILENT.keys())
def test_silent_shapes(source):
    assert reported_lines(CODE, source) == []
