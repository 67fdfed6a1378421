"""MEM303 load-without-map-location."""

import ast
import re
from dataclasses import dataclass

from memlint.lint.diagnostic import Applicability, Severity
from memlint.lint.names import dotted_name
from memlint.lint.rule import Rule
from memlint.lint.semantic.frameworks import CPU_ENGINE_KEYWORDS, DEVICE_PLACED_ROLES
from memlint.lint.semantic.operations import engine_by_use
from memlint.lint.semantic.values import PLAIN, Kind, Tri
from memlint.lint.signatures import arguments_bound
from memlint.lint.syntax import FUNCTION_TYPES

LOAD_FUNCTIONS = frozenset({"torch.load"})
SAVE_FUNCTIONS = frozenset({"torch.save"})
#: ``Fabric.save(path, state)`` (lightning 2.6.6 ``lightning/fabric/fabric.py``) writes ``state``'s tensors as they are.
ENGINE_SAVES = frozenset({"lightning.fabric.Fabric", "lightning.Fabric"})
#: Converters that write host tensors only -> (keyword, position) of their output path:
#: deepspeed ``utils/zero_to_fp32.py`` consolidates ZeRO shards on the CPU (deepspeed 0.16);
#: Lightning re-exports it (``lightning/pytorch/utilities/deepspeed.py``, 2.6.6); accelerate
#: ``merge_fsdp_weights`` loads the DCP shards with ``no_dist=True`` into CPU tensors (1.15.0).
HOST_WRITERS = {
    "deepspeed.utils.zero_to_fp32.convert_zero_checkpoint_to_fp32_state_dict": ("output_file", 1),
    "lightning.pytorch.utilities.deepspeed.convert_zero_checkpoint_to_fp32_state_dict": ("output_file", 1),
    "pytorch_lightning.utilities.deepspeed.convert_zero_checkpoint_to_fp32_state_dict": ("output_file", 1),
    "accelerate.utils.merge_fsdp_weights": ("output_path", 1),
}
#: Fabric strategies whose ``save`` writes no device tensors: FSDP's full state dict is gathered
#: with ``offload_to_cpu`` for GPU parameters (lightning 2.6.6 ``fabric/strategies/fsdp.py``
#: ``_get_full_state_dict_context``), its sharded one goes to ``.distcp`` files beside a metadata
#: ``meta.pt``; ``ModelParallelStrategy`` saves with ``StateDictOptions(cpu_offload=True)``
#: (``fabric/strategies/model_parallel.py``); litgpt's ``ThunderFSDPStrategy`` saves with
#: ``StateDictOptions(..., cpu_offload=True)`` (litgpt ``extensions/thunder/strategies/thunder_fsdp.py``).
SHARDING_STRATEGIES = frozenset({"FSDPStrategy", "ModelParallelStrategy", "ThunderFSDPStrategy"})
#: The metadata file of a Lightning distributed checkpoint: loop counters, callbacks' state,
#: versions and other non-tensor entries; the tensors are in the ``.distcp`` shards beside
#: it (lightning 2.6.6 ``fabric/utilities/load.py`` ``_METADATA_FILENAME``).
LIGHTNING_METADATA_FILE = "meta.pt"
LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric")
#: Calls that give the same path in another type.
PATH_CONVERSIONS = frozenset({"str", "os.fspath", "pathlib.Path", "os.path.abspath", "os.path.expanduser"})
#: Packages of XLA (TPU) code: ``torch_xla`` 2.x.
XLA_PACKAGES = ("torch_xla",)
#: In-memory file objects: ``torch.save`` into one and ``torch.load`` back is a copy, devices kept.
MEMORY_BUFFERS = frozenset({"io.BytesIO", "_io.BytesIO"})
#: Classes whose methods load data files, not checkpoints.
DATA_ROLES = frozenset({"dataset", "datamodule"})
#: How many (function, name) places the sample-use walk of a loaded object follows.
_SAMPLE_FLOW_LIMIT = 16
#: A file name inside a path literal: ``"generator_%d.pth"``, ``"model.pt"``.
_FILE_NAME = re.compile(r"[\w%{}\-]+\.[A-Za-z]\w*$")


class LoadWithoutMapLocation(Rule):
    """## What it does
    Reports `torch.load(f)` called without `map_location`, also through a
    name bound once to a `functools.partial` of `torch.load` that binds
    keywords only (`load = partial(torch.load, weights_only=True)` ...
    `load(path)`), when neither the partial nor the call gives it.

    ## Why is this bad?
    `torch.load` restores every tensor onto the device it was saved from.
    A checkpoint written on a GPU is loaded onto that same GPU, in addition
    to the model's own copy; in distributed training every rank restores it
    onto `cuda:0`, so GPU 0 runs out of memory first.

    ## Example
    ```python
    state = torch.load("checkpoint.pt")
    model.load_state_dict(state["model"])
    ```

    ## Use instead
    ```python
    state = torch.load("checkpoint.pt", map_location="cpu")
    model.load_state_dict(state["model"])
    ```

    ## Fix safety
    Adding `map_location="cpu"` is unsafe: code that used the loaded tensors
    directly on the GPU now receives CPU tensors. So the fix is offered only
    where the code that receives them places them itself: the loaded value,
    or an entry of it (`torch.load(p)["model"]`), is passed to
    `load_state_dict` or a call like it (`set_model_state_dict`,
    `optim_state_dict_to_load`, `load_from_full_model_state_dict`), which
    copy into tensors already placed or move to the parameters' device, or
    is moved with `.to(...)`/`.cuda()`, directly or through a name it is
    assigned to that reaches that use with no other assignment on the way
    (one in another branch of an `if` does not count). A whole pickled
    model or optimizer used as it is loaded (`model = torch.load(f)`,
    `model, criterion, optimizer = torch.load(f)`) gets no fix, nor does a
    load in a test function that asserts on a tensor's device
    (`assert x.device.type == "cuda"`, `x.is_cuda`).

    ## When it is reported
    Only where the checkpoint may hold accelerator tensors: the file's own
    `torch.save` (or Fabric `save`) of that path saves device data (the
    `state_dict()` of a model on the accelerator, or of an optimizer built
    over such a model's parameters, `getattr(torch.optim, name)(...)` too:
    its state tensors sit beside the parameters), or, with
    no such save, the code shows it runs on an accelerator (`.cuda()`,
    `torch.cuda.*`, a `"cuda"`/`"gpu"`/`"mps"` device or one built from a
    `"cuda:"` prefix (`f"cuda:{gpu}"`, `"cuda:" + str(rank)`), an Accelerator or
    Fabric). A test function must show it itself (a GPU marker such as
    `@pytest.mark.skipif(not torch.cuda.is_available())`), since test suites
    run unmarked tests on CPU machines.

    ## Known problems
    Not reported: a call with `**kwargs` or `*args` (`map_location` may be
    among them); a load of a path that the file saves only host data to
    (`.cpu()` tensors, numpy arrays, plain Python values, the `state_dict()`
    of a module built and never moved or of an optimizer of its parameters,
    a `GradScaler`'s state), or of any
    path when every checkpoint the file writes holds host data only (a
    checkpoint from elsewhere loaded by such a file is missed); a load
    inside a `Dataset` or `LightningDataModule` (data files), or of an
    object that the file, through the functions it is returned to and
    passed to, only reads as samples (indexed or sliced, never by a string
    key; `len`; given to an in-file `Dataset`) and never hands to
    `load_state_dict`, a model, a move or a library call (a data file
    written elsewhere); an in-memory
    `io.BytesIO` round trip; a function's own working state that it saves
    back to the same path later, every process that loads it saving it too
    (`queue = torch.load(p)["queue"]` ... `torch.save({"queue": queue}, p)`,
    a per-rank file), when the loaded object is not copied into a model or
    moved (it comes back on the device it was saved from, and it is that
    state, not a second copy); the `meta.pt` metadata file of a Lightning
    distributed checkpoint; files of XLA code (`torch_xla`), whose
    `xm.save` writes CPU tensors. A file written in another file of the
    repository is not seen.

    ## References
    - [torch.load](https://pytorch.org/docs/stable/generated/torch.load.html)
    - [Saving and loading models across devices](https://pytorch.org/tutorials/beginner/saving_loading_models.html)
    """

    CODE = "MEM303"
    NAME = "load-without-map-location"
    MESSAGE = "`torch.load` without `map_location` restores tensors onto the GPU they were saved from"
    SEVERITY = Severity.WARNING
    FIX_TITLE = 'Add `map_location="cpu"`'
    FIX_APPLICABILITY = Applicability.UNSAFE
    TRIGGERS = ("load",)
    NEEDS_NAMES = ("load",)
    FRAMEWORK = "torch"
    VALID = (
        "import torch\nimport lightning as L\ndevice = torch.device('cuda')\ndef read_meta(ckpt_dir):\n    return torch.load(ckpt_dir / 'meta.pt')\n",
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType, FullStateDictConfig\npolicy = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)\ndef save(model, path):\n    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, policy):\n        state = model.state_dict()\n    torch.save(state, path)\ndef load(model, path):\n    model.load_state_dict(torch.load(path))\n",
        "import torch\ndef train(model, loader, opt, out):\n    model.cuda()\n    for x in loader:\n        opt.zero_grad()\n        model(x.cuda()).sum().backward()\n        opt.step()\n    model.eval().cpu()\n    torch.save(model.state_dict(), out)\ndef stylize(args, model):\n    model.load_state_dict(torch.load(args.model))\n",
        "import torch\nmodel = model.cuda()\nstate = torch.load('ckpt.pt', map_location='cpu')\n",
        "import torch\nmodel = model.cuda()\nstate = torch.load('ckpt.pt', 'cpu')\n",
        "import numpy as np\nx = np.load('data.npy')\n",
        "from mylib import load\nx = load('ckpt.pt')\n",
        "import torch\ndef f(**kw):\n    return torch.load('a.pt', **kw).cuda()\n",
        "import torch\ndef f(*args):\n    return torch.load(*args).cuda()\n",
        "import torch\ndef cache(features, path='feats.pt'):\n    torch.save({k: v.cpu() for k, v in features.items()}, path)\n    return torch.load(path)\n",
        "import torch\nscaler = torch.amp.GradScaler('cuda')\ntorch.save(scaler.state_dict(), 'scaler.pt')\nscaler.load_state_dict(torch.load('scaler.pt'))\n",
        "import torch\nstate = torch.load('ckpt.pt')\n",
        "import torch\nimport torch.nn as nn\nnet = nn.Linear(2, 2)\ntorch.save(net.state_dict(), 'w.pt')\ndevice = 'cuda'\nnet.load_state_dict(torch.load('w.pt'))\n",
        "import unittest, torch\nclass TestResume(unittest.TestCase):\n    def test_resume(self):\n        torch.save(make_state(), self.path)\n        assert torch.load(self.path)\n    def test_on_gpu(self):\n        assert torch.ones(1, device='cuda')\n",
        "import torch\nfrom torch.utils.data import Dataset\nclass Frames(Dataset):\n    def __init__(self, path):\n        self.x, self.y = torch.load(path)\n    def __getitem__(self, i):\n        return self.x[i].cuda()\n",
        "import io, torch\ndef roundtrip(obj):\n    buffer = io.BytesIO()\n    torch.save(obj.cuda(), buffer)\n    buffer.seek(0)\n    return torch.load(buffer)\n",
    )
    INVALID = (
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType, FullStateDictConfig\ndef save(model, path):\n    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=True)):\n        state = model.state_dict()\n    torch.save(state, path)\ndef load(model, path):\n    model.load_state_dict(torch.load(path))  # expect: MEM303\n",
        "import torch\nmodel = model.cuda()\nstate = torch.load('ckpt.pt')\n",
        "import torch\ndef save(model, path):\n    torch.save(model.cuda().state_dict(), path)\ndef load(path):\n    return torch.load(path)  # expect: MEM303\n",
        "import torch as T\ndevice = T.device('cuda')\nstate = T.load(path, weights_only=True)\n",
        "from torch import load\nimport torch\ncuda = torch.cuda.is_available()\nstate = load(path)\n",
        "import os, torch\ndef save(net, root):\n    torch.save(net.state_dict(), os.path.join(root, 'gen.pth'))\ndef resume(net, root):\n    net.cuda()\n    net.load_state_dict(torch.load(f'{root}/gen.pth'))  # expect: MEM303\n",
        "import unittest, torch\nclass TestResume(unittest.TestCase):\n    @unittest.skipUnless(torch.cuda.is_available(), 'gpu')\n    def test_resume(self):\n        assert torch.load(self.path)  # expect: MEM303\n",
    )

    def visit_Call(self, node: ast.Call) -> None:
        keywords = self._load_keywords(node)
        if keywords is None:
            return
        if len(node.args) >= 2 or any(isinstance(arg, ast.Starred) for arg in node.args):
            return  # map_location passed positionally, or maybe among `*args`
        if any(keyword.arg in (None, "map_location") for keyword in keywords):
            return  # `map_location=` or `**kwargs`
        semantic = self.ctx.semantic
        if semantic.imports(*XLA_PACKAGES):
            return  # `xm.save` writes CPU tensors; XLA broadcasts keep the XLA device on purpose
        path = _path_argument(node, "f")
        if path is not None and semantic.value(path).type_name in MEMORY_BUFFERS:
            return  # an in-memory round trip restores the tensors where they were, as intended
        if path is not None and LIGHTNING_METADATA_FILE in _file_names(path) and semantic.imports(*LIGHTNING_PACKAGES):
            return  # a distributed checkpoint's metadata: no tensors
        origin = self._origin(path)
        if origin is Tri.NO or origin is Tri.MAYBE and not self._runs_on_accelerator(node):
            return
        if origin is Tri.MAYBE and self._read_as_samples(node):
            return  # a data file (token lists, sample tensors), not a checkpoint
        if self._reloads_own_state(node, path):
            return  # the process's own working state, back where it kept it
        self.report(node, fix=self._map_location_fix(node))

    def _load_keywords(self, node: ast.Call) -> list[ast.keyword] | None:
        """The keywords that ``torch.load`` receives from the call ``node``,
        or None when ``node`` does not call it: its own, for a direct call;
        with those a keyword-only ``functools.partial`` of ``torch.load``
        binds, for a call of the name bound to it (``load =
        partial(T.load, weights_only=True)`` ... ``load(path)``)."""
        if self.ctx.qualified(node.func) in LOAD_FUNCTIONS:
            return list(node.keywords)
        made = self.ctx.semantic.keyword_partial(node.func)
        if made is None or self.ctx.qualified(made.args[0]) not in LOAD_FUNCTIONS:
            return None
        return list(made.keywords) + list(node.keywords)

    def _read_as_samples(self, load: ast.Call) -> bool:
        """Everything the file does with the loaded object treats it as a
        collection of samples: it is indexed or sliced (``data[i]``,
        ``data[:n]``, not ``ckpt["model"]`` or a saved tuple's ``state[0]``), measured with ``len``, or given
        to an in-file ``Dataset`` class, through the names it is bound to,
        the in-file functions it is passed to and the callers it is returned
        to; at least one of those reads happens, and nothing else (no
        ``load_state_dict``, no model, no move, no library call) touches it.
        Such a file is a dataset written elsewhere, not a checkpoint of the
        training run; where any use is of another kind the rule decides as
        usual."""
        semantic = self.ctx.semantic
        unit = semantic.unit_of(load)
        parent = semantic.parents.get(load)
        if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
            return False
        pending = [(unit, parent.targets[0].id)]
        seen: set[tuple[ast.AST, str]] = set()
        sampled = False
        while pending:
            place = pending.pop()
            if place in seen:
                continue
            seen.add(place)
            if len(seen) > _SAMPLE_FLOW_LIMIT:
                return False
            scope, name = place
            for read in ast.walk(scope):
                if not (isinstance(read, ast.Name) and read.id == name and isinstance(read.ctx, ast.Load)):
                    continue
                use = semantic.parents.get(read)
                if isinstance(use, ast.Subscript) and use.value is read:
                    if isinstance(use.slice, ast.Constant):
                        return False  # an entry by key or a fixed field (`ckpt["model"]`, `state[0]`): a checkpoint's layout
                    sampled = True
                elif isinstance(use, ast.Call) and read in use.args:
                    if self.ctx.qualified(use.func) == "len":
                        continue
                    kind = semantic.value(use)
                    klass = semantic.classes.get(kind.klass) if kind.klass else None
                    if klass is not None and DATA_ROLES & klass.roles:
                        sampled = True
                        continue
                    callee = semantic.callee(use)
                    if not isinstance(callee, FUNCTION_TYPES):
                        return False
                    bound = arguments_bound(use, callee, skip_receiver=isinstance(use.func, ast.Attribute))
                    names = [parameter for parameter, argument in bound.items() if argument is read]
                    if not names:
                        return False
                    pending.extend((callee, parameter) for parameter in names)
                elif isinstance(use, ast.Return) or isinstance(use, ast.Tuple) and isinstance(
                        semantic.parents.get(use), ast.Return):
                    returned = self._returned_to(scope, None if isinstance(use, ast.Return) else use.elts.index(read))
                    if returned is None:
                        return False
                    pending.extend(returned)
                else:
                    return False
        return sampled

    def _returned_to(self, function: ast.AST, position: int | None) -> list[tuple[ast.AST, str]] | None:
        """The names the callers of ``function`` bind its result to (its
        ``position``-th element when it returns a tuple), or None when a
        caller does something else with it."""
        semantic = self.ctx.semantic
        if not isinstance(function, FUNCTION_TYPES):
            return None
        places = []
        calls = semantic.call_sites_of(function)
        for call in calls:
            assignment = semantic.parents.get(call)
            if not (isinstance(assignment, ast.Assign) and len(assignment.targets) == 1):
                return None
            target = assignment.targets[0]
            if position is not None:
                if not (isinstance(target, ast.Tuple) and len(target.elts) > position):
                    return None
                target = target.elts[position]
            if not isinstance(target, ast.Name):
                return None
            places.append((semantic.unit_of(call), target.id))
        return places or None

    def _reloads_own_state(self, load: ast.Call, path: ast.expr | None) -> bool:
        """The load restores the working state that the same function writes
        to the same path: the names the loaded object is bound to
        (:func:`_state_names`: ``queue = torch.load(p)["queue"]``, or
        ``ckpt = torch.load(p)`` and ``bank = ckpt["bank"]``) are the names the
        function saves back there (``torch.save({"queue": queue}, p)``), and
        every process that runs the load also runs that save, later (no
        condition on the way to the save but tests of the saved state
        itself, ``if queue is not None``), and the loaded object is not
        copied into a model or moved (:func:`_places_loaded_tensors`). The tensors come back on the device each
        process saved them from, and they are that state itself, not a
        second copy beside a model; a file that only some process (rank 0)
        writes and all of them read is still reported."""
        if path is None:
            return False
        semantic = self.ctx.semantic
        unit = semantic.unit_of(load)
        state = _state_names(semantic, load, unit)
        if not state or _places_loaded_tensors(semantic, load):
            return False  # copied into a model or moved: a checkpoint of something else, not the state itself
        key = self._path_key(path)
        for save in self._saves():
            if save.obj is None or semantic.unit_of(save.path) is not unit or not _after(semantic, save.obj, load):
                continue
            if self._path_key(save.path) != key or not self._same_assignment(path, save.path):
                continue
            saved = _saved_names(save.obj)
            if saved and saved <= state and _runs_with(semantic, save.obj, load, state):
                return True
        return False

    def _map_location_fix(self, load: ast.Call):
        """``map_location="cpu"`` where the loaded tensors are placed by the
        code that receives them (see :func:`_places_loaded_tensors`); no fix
        in a test function that asserts on devices (:func:`_asserts_devices`),
        nor for a whole pickled object (a model, an optimizer) used as it comes."""
        semantic = self.ctx.semantic
        if any(semantic.is_test_function(a) and _asserts_devices(a) for a in semantic.ancestors(load)):
            return None
        if not _places_loaded_tensors(semantic, load):
            return None
        return self.fix(self.plan("add_keyword", load, keyword="map_location", code='"cpu"'))

    def _origin(self, path: ast.expr | None) -> Tri:
        """Whether the file's own saves of ``path`` hold accelerator tensors:
        YES when one saves device data, NO when all save host data only,
        MAYBE when none is found or what they save is not known."""
        if path is None:
            return Tri.MAYBE
        key, names = self._path_key(path), _file_names(path)
        semantic = self.ctx.semantic
        unit = semantic.unit_of(path)
        in_test = semantic.is_test_function(unit)
        # In the same function a path is the same file when its expression or
        # its file name is; elsewhere the same expression, or the same file
        # name outside tests (each test writes its own temporary directory).
        here = [save for save in self._saves() if semantic.unit_of(save.path) is unit
                and (self._path_key(save.path) == key and self._same_assignment(path, save.path)
                     or names & _file_names(save.path))]
        saved = here or [save for save in self._saves() if semantic.unit_of(save.path) is not unit and (
            self._path_key(save.path) == key or (
            not in_test and names & _file_names(save.path) and not semantic.is_test_function(semantic.unit_of(save.path))))]
        if not saved:
            # no save of this path: when every checkpoint the file writes holds host data
            # only (a script that saves after `model.cpu()`), what it loads is one of them
            saved = self._saves()
            if in_test or not saved or not all(_host_only(self._saved_value(save)) for save in saved):
                return Tri.MAYBE  # each test writes its own files, some by other means
        values = [self._saved_value(save) for save in saved]
        if any(v.device is Tri.YES and v.kind is not Kind.PLAIN for v in values):
            return Tri.YES
        return Tri.NO if all(_host_only(v) for v in values) else Tri.MAYBE

    def _saved_value(self, save: "Save"):
        return PLAIN if save.obj is None else self.ctx.semantic.value(save.obj)

    def _same_assignment(self, path: ast.expr, saved: ast.expr) -> bool:
        """A variable path names the same file at both places: no other
        assignment to it comes between (``p = a / "x.pt"`` ... ``p = a / "y.pt"``)."""
        if not isinstance(path, ast.Name) or not isinstance(saved, ast.Name):
            return True
        semantic = self.ctx.semantic
        return semantic.assignment_before(path) is semantic.assignment_before(saved)

    def _runs_on_accelerator(self, load: ast.Call) -> bool:
        """The code around ``load`` runs on an accelerator, so a checkpoint it
        wrote holds device tensors. A test function shows it itself (a GPU
        marker, a CUDA device): test suites run unmarked tests on CPU
        machines. A dataset's or data module's method loads data files,
        which hold host tensors; an HF Trainer's or TrainerCallback's method
        runs with the trainer's model on the accelerator. Other code: its
        file uses an accelerator."""
        semantic = self.ctx.semantic
        for ancestor in semantic.ancestors(load):
            if isinstance(ancestor, ast.ClassDef):
                klass = semantic.classes.of(ancestor)
                if klass is not None and klass.roles & DATA_ROLES:
                    return False
                if klass is not None and klass.roles & DEVICE_PLACED_ROLES:
                    return True  # a Trainer callback: the trainer runs it with its model on the accelerator
            elif semantic.is_test_function(ancestor):
                klass = semantic.class_of_method(ancestor)
                return semantic.uses_accelerator(ancestor, explicit=True) or (
                    klass is not None and any(semantic.uses_accelerator(d, explicit=True) for d in klass.node.decorator_list))
        return semantic.uses_accelerator(semantic.module) or self._engine_in_use()

    def _engine_in_use(self) -> bool:
        """The file trains through an engine that a helper of another file
        builds (``accelerator = helpers.prepare_accelerator(args)``), known by
        its use (``accelerator.prepare(...)`` and ``accelerator.backward(loss)``,
        :func:`~memlint.lint.semantic.operations.engine_by_use`): as with an
        ``Accelerator()`` built in the file, the code runs on the accelerator
        the engine picks."""
        semantic = self.ctx.semantic
        for call in self.ctx.index.of_type(ast.Call):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "backward" and call.args \
                    and engine_by_use(semantic, call, func.value):
                return True
        return False

    def _saves(self) -> list["Save"]:
        """Every write of a checkpoint file in this file: ``torch.save``,
        an engine's ``.save(path, state)`` and the converters of
        :data:`HOST_WRITERS`."""
        found = self.__dict__.get("_save_calls")
        if found is None:
            found = self.__dict__["_save_calls"] = []
            for call in self.ctx.index.of_type(ast.Call):
                save = self._save_of(call)
                if save is not None and save.path is not None:
                    found.append(save)
        return found

    def _save_of(self, call: ast.Call) -> "Save | None":
        qualified = self.ctx.qualified(call.func)
        if qualified in SAVE_FUNCTIONS:
            obj = _path_argument(call, "obj", 0)
            return Save(_path_argument(call, "f", 1), obj) if obj is not None else None
        if qualified in HOST_WRITERS:
            keyword, index = HOST_WRITERS[qualified]
            return Save(_path_argument(call, keyword, index), None)
        if isinstance(call.func, ast.Attribute) and call.func.attr == "save" and self._is_engine(call.func.value):
            path = _path_argument(call, "path", 0)
            if self._engine_saves_host_data(call.func.value):
                return Save(path, None)
            obj = _path_argument(call, "state", 1)
            return Save(path, obj) if obj is not None else None
        return None

    def _is_engine(self, receiver: ast.expr) -> bool:
        return self.ctx.semantic.value(receiver).type_name in ENGINE_SAVES

    def _engine_saves_host_data(self, receiver: ast.expr) -> bool:
        """``receiver`` was built in its function as ``Fabric(strategy=...)`` with a sharding
        strategy, or as ``Fabric(accelerator="cpu")``: its saves hold host tensors only."""
        if not isinstance(receiver, ast.Name):
            return False
        built = self.ctx.semantic.assignment_before(receiver)
        return (built is not None and isinstance(built.value, ast.Call)
                and self.ctx.qualified(built.value.func) in ENGINE_SAVES
                and (_shards(self.ctx, built.value) or _on_cpu(built.value)))

    def _path_key(self, path: ast.expr) -> str:
        """What identifies a path: its literal, or the code of the expression
        (``args.ckpt``, ``path``), seen through ``str(p)``/``os.fspath(p)``/``Path(p)``."""
        while isinstance(path, ast.Call) and len(path.args) == 1 and not path.keywords and (
                self.ctx.qualified(path.func) in PATH_CONVERSIONS):
            path = path.args[0]
        if isinstance(path, ast.Constant) and isinstance(path.value, str):
            return "literal:" + path.value
        name = dotted_name(path)
        return "code:" + (name if name is not None else self.ctx.code(path))

#: Calls that copy a state dict into objects already placed, so CPU tensors
#: are as good as device ones: ``Module.load_state_dict`` copies each tensor
#: in with ``param.copy_(input_param)`` (torch 2.13.0 ``nn/modules/module.py``
#: ``_load_from_state_dict``); ``Optimizer.load_state_dict`` moves the state to
#: each parameter's device (``optim/optimizer.py``
#: ``_process_value_according_to_param_policy``); ``set_model_state_dict`` /
#: ``set_optimizer_state_dict`` (``distributed/checkpoint/state_dict.py``),
#: ``FSDP.optim_state_dict_to_load`` and litgpt's
#: ``load_from_full_model_state_dict(..., device=...)`` place what they load.
_STATE_DICT_LOADERS = re.compile(r"(?:.*_)?load(?:_\w*)?_state_dict|\w*state_dict_to_load|_?set_\w*state_dict")
#: Methods that move the loaded object where the program wants it.
_MOVES = frozenset({"to", "cuda"})


def _places_loaded_tensors(semantic, load: ast.Call) -> bool:
    """The value of ``load`` (or an entry of it, ``torch.load(p)["model"]``)
    goes into a call of :data:`_STATE_DICT_LOADERS` or is moved with
    ``.to(...)``/``.cuda()``: directly, or through a name it is assigned to
    that reaches such a use with no other assignment on the way."""
    value = _outer_subscript(semantic, load)
    if _is_placing_use(semantic, value):
        return True
    statement = semantic.parents.get(value)
    if not (isinstance(statement, ast.Assign) and statement.value is value and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)):
        return False
    target = statement.targets[0]
    unit = semantic.unit_of(load)
    uses = [n for n in semantic.own_nodes(unit, (ast.Name,))
            if n.id == target.id and isinstance(n.ctx, ast.Load) and _after(semantic, n, target)]
    return any(_reaches(semantic, target, use) and _is_placing_use(semantic, _outer_subscript(semantic, use))
               for use in uses)


#: Tensor attributes that tell where a tensor is.
_DEVICE_ATTRIBUTES = frozenset({"device", "is_cuda", "is_mps", "get_device"})


def _asserts_devices(function: ast.AST) -> bool:
    """An ``assert`` or an ``assert*(...)`` call in ``function`` reads a
    tensor's device (``x.device.type``, ``x.is_cuda``)."""
    for node in ast.walk(function):
        checked = None
        if isinstance(node, ast.Assert):
            checked = node.test
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.startswith("assert"):
            checked = node
        if checked is not None and any(isinstance(n, ast.Attribute) and n.attr in _DEVICE_ATTRIBUTES
                                       for n in ast.walk(checked)):
            return True
    return False


def _outer_subscript(semantic, expr: ast.expr) -> ast.expr:
    """``expr`` or the outermost subscript of it (``x`` -> ``x["a"]["b"]``)."""
    parent = semantic.parents.get(expr)
    while isinstance(parent, ast.Subscript) and parent.value is expr:
        expr, parent = parent, semantic.parents.get(parent)
    return expr


def _is_placing_use(semantic, expr: ast.expr) -> bool:
    """``expr`` is an argument of a state-dict loader, or the receiver of a
    called ``.to``/``.cuda``."""
    parent = semantic.parents.get(expr)
    if isinstance(parent, ast.keyword):
        expr, parent = parent, semantic.parents.get(parent)
    if isinstance(parent, ast.Call) and (expr in parent.args or expr in parent.keywords):
        name = parent.func.attr if isinstance(parent.func, ast.Attribute) else dotted_name(parent.func)
        return name is not None and _STATE_DICT_LOADERS.fullmatch(name.rsplit(".", 1)[-1]) is not None
    if isinstance(parent, ast.Attribute) and parent.value is expr and parent.attr in _MOVES:
        call = semantic.parents.get(parent)
        return isinstance(call, ast.Call) and call.func is parent
    return False


def _after(semantic, node: ast.AST, anchor: ast.AST) -> bool:
    at, start = semantic.index.position_of(node), semantic.index.position_of(anchor)
    return at is not None and start is not None and at > start


def _reaches(semantic, target: ast.Name, use: ast.Name) -> bool:
    """No other binding of the name lies between ``target`` and ``use`` in
    the text, except in another branch of an ``if`` than ``target``'s
    (``if a: s = torch.load(p) else: s = {}`` ... ``load_state_dict(s)``)."""
    start, end = semantic.index.position_of(target), semantic.index.position_of(use)
    if start is None or end is None:
        return False
    around_use = set(semantic.ancestors(use))
    for binding in semantic.scopes.bindings_of(target.id, semantic.scopes.scope_for(target)):
        at = semantic.index.position_of(binding.node)
        if binding.node is target or at is None or not start < at < end:
            continue
        if semantic.parents.get(binding.node) in around_use:
            continue  # `m = m.to(device)`: the use is read before the name is bound again
        if not _exclusive(semantic, binding.node, target):
            return False
    return True


def _exclusive(semantic, a: ast.AST, b: ast.AST) -> bool:
    """``a`` and ``b`` are in different branches of one ``if`` statement."""
    branches = dict(_if_branches(semantic, a))
    return any(statement in branches and branches[statement] != branch for statement, branch in _if_branches(semantic, b))


def _if_branches(semantic, node: ast.AST):
    """(``if`` statement, "body" or "orelse") for each ``if`` around ``node``."""
    child, parent = node, semantic.parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.If) and child is not parent.test:
            yield parent, "body" if child in parent.body else "orelse"
        child, parent = parent, semantic.parents.get(parent)


def _path_argument(call: ast.Call, keyword: str, index: int = 0) -> ast.expr | None:
    for named in call.keywords:
        if named.arg == keyword:
            return named.value
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    return positional[index] if index < len(positional) else None


@dataclass(frozen=True)
class Save:
    """A write of a checkpoint: its path expression and the object saved (None: host data only)."""

    path: ast.expr | None
    obj: ast.expr | None


def _on_cpu(engine: ast.Call) -> bool:
    """The engine was built to run on the CPU (``Fabric(accelerator="cpu")``)."""
    return any(isinstance(k.value, ast.Constant) and CPU_ENGINE_KEYWORDS.get(k.arg, ...) == k.value.value
               for k in engine.keywords)


def _shards(ctx, engine: ast.Call) -> bool:
    """The engine was built with a strategy of :data:`SHARDING_STRATEGIES` (or ``strategy="fsdp..."``)."""
    for keyword in engine.keywords:
        if keyword.arg != "strategy":
            continue
        value = keyword.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return value.value.startswith("fsdp")
        if isinstance(value, ast.Name):
            assigned = ctx.semantic.assignment_before(value)
            value = assigned.value if assigned is not None else value
        if isinstance(value, ast.Call):
            name = ctx.qualified(value.func) or dotted_name(value.func) or ""
            return name.rsplit(".", 1)[-1] in SHARDING_STRATEGIES
    return False


def _file_names(path: ast.expr) -> frozenset[str]:
    """The file names spelled in ``path``'s string literals (``os.path.join(d, "a.pt")``, f-strings)."""
    names = set()
    for node in ast.walk(path):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            last = node.value.replace("\\", "/").rsplit("/", 1)[-1]
            if _FILE_NAME.fullmatch(last):
                names.add(last)
    return frozenset(names)


def _host_only(value) -> bool:
    """Saved data that holds no accelerator tensor."""
    if value.device is Tri.NO:
        return True
    return value.kind is Kind.PLAIN


def _state_names(semantic, load: ast.Call, unit: ast.AST) -> frozenset[str]:
    """The names that hold what ``load`` restores: the target of ``name =
    torch.load(p)`` (or of an entry of it, ``torch.load(p)["k"]``), and the
    targets of ``other = name["k"]`` in the same function. Empty when the
    loaded object goes anywhere else."""
    statement = semantic.parents.get(_outer_subscript(semantic, load))
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
        return frozenset()
    loaded = statement.targets[0].id
    names = {loaded}
    for assign in semantic.own_nodes(unit, (ast.Assign,)):
        value = assign.value
        while isinstance(value, ast.Subscript):
            value = value.value
        if (value is not assign.value and isinstance(value, ast.Name) and value.id == loaded
                and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)):
            names.add(assign.targets[0].id)
    return frozenset(names)


def _saved_names(obj: ast.expr) -> frozenset[str]:
    """The names a save writes when its object is a name, or a dict, tuple or
    list of names (``{"queue": queue}``); empty for anything else."""
    if isinstance(obj, ast.Name):
        return frozenset({obj.id})
    members = obj.values if isinstance(obj, ast.Dict) else obj.elts if isinstance(obj, (ast.Tuple, ast.List)) else None
    if not members or not all(isinstance(m, ast.Name) for m in members):
        return frozenset()
    return frozenset(m.id for m in members)


def _runs_with(semantic, saved: ast.expr, load: ast.Call, state: frozenset[str]) -> bool:
    """Every ``if`` around the save that is not around the load tests only
    names of ``state`` (``if queue is not None``): the processes that load
    also save."""
    around_load = {id(a) for a in semantic.ancestors(load)}
    for ancestor in semantic.ancestors(saved):
        if id(ancestor) in around_load:
            return True
        if isinstance(ancestor, (ast.If, ast.While)):
            tested = {n.id for n in ast.walk(ancestor.test) if isinstance(n, ast.Name)}
            if not tested <= state:
                return False
        elif isinstance(ancestor, ast.ExceptHandler):
            return False  # runs only when something failed
    return True
