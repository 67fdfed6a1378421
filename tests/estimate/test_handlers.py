import pytest
import torch

from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.handlers import choose_sdpa_backend
from memlint.estimate.workload import Workload, load_workload

from estimate_helpers import target

B, H, L, D = 2, 4, 512, 32


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(D))

    def forward(self, x):  # x: [B, H, L, D]
        q = x * self.scale
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)


def attention_workload(dtype=torch.float32):
    return Workload(module=Attention().to("meta"), make_inputs=lambda b: (torch.randn(b, H, L, D, dtype=dtype),),
                    loss_fn=lambda out, inputs: out.float().pow(2).mean(), name="attention")


def test_backend_rules():
    q16 = torch.empty(B, H, L, 64, device="meta", dtype=torch.float16)
    q32 = torch.empty(B, H, L, 64, device="meta")
    assert choose_sdpa_backend(q16, q16, q16, None, (8, 0)) == "flash"
    assert choose_sdpa_backend(q16, q16, q16, None, (7, 5)) == "efficient"
    assert choose_sdpa_backend(q16, q16, q16, q16, (9, 0)) == "efficient"  # attn_mask rules out flash
    assert choose_sdpa_backend(q32, q32, q32, None, (9, 0)) == "efficient"
    odd = torch.empty(B, H, L, 30, device="meta", dtype=torch.float16)
    assert choose_sdpa_backend(odd, odd, odd, None, (8, 0)) == "math"


def test_flash_does_not_materialise_attention_matrix():
    matrix = B * H * L * L * 2  # bf16 [B,H,L,L]
    flash = estimate(attention_workload(), EstimateOptions(batch_size=B, precision="amp-bf16", gpu="A100-80GB"))
    math = estimate(attention_workload(), EstimateOptions(batch_size=B, precision="amp-bf16", gpu="V100-16GB"))
    assert flash.kernel_choices == {"sdpa:flash": 2}  # one call per step, two steps
    assert flash.activation_bytes < matrix
    # bf16 is not supported by the fused kernels before sm80: math backend, upcast to fp32
    assert math.kernel_choices == {"sdpa:math": 2}
    assert math.activation_bytes > 2 * matrix


def test_math_backend_keeps_the_matrix():
    # head_dim 30 is not a multiple of 8 (or 4): math backend, fp32 [B,H,L,L] softmax kept
    class Odd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(30))

        def forward(self, x):
            q = x * self.scale
            return torch.nn.functional.scaled_dot_product_attention(q, q, q)

    workload = Workload(module=Odd().to("meta"), make_inputs=lambda b: (torch.randn(b, H, L, 30),), name="odd")
    result = estimate(workload, EstimateOptions(batch_size=B))
    assert result.kernel_choices == {"sdpa:math": 2}
    assert result.activation_bytes >= B * H * L * L * 4


def test_dropout_keeps_bool_mask():
    n = 4096

    class Drop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(n))
            self.drop = torch.nn.Dropout(0.1)

        def forward(self, x):
            return self.drop(x * self.w)

    workload = Workload(module=Drop().to("meta"), make_inputs=lambda b: (torch.randn(b, n),), name="drop")
    result = estimate(workload, EstimateOptions(batch_size=8))
    # dropout keeps a bool mask (1 byte/element) plus its fp32 output (the forward's output)
    assert result.by_module["drop"] == 8 * n * 1 + 8 * n * 4
    assert result.kernel_choices.get("dropout:native_dropout(bool mask)") == 2


@pytest.mark.slow
def test_hf_models_trace():
    for factory in ("gpt2", "bert", "llama"):
        workload = load_workload(target("hf_models.py") + f":{factory}")
        plain = estimate(workload, EstimateOptions())
        assert plain.by_category["parameter"] == sum(p.numel() * p.element_size() for p in workload.module.parameters())
        if factory != "bert":
            ckpt = estimate(workload, EstimateOptions(checkpointing=True, precision="amp-bf16"))
            assert ckpt.checkpointed and ckpt.activation_bytes < plain.activation_bytes


def test_package_module_target(tmp_path, monkeypatch):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(
        "import torch\n\ndef build():\n    return torch.nn.Linear(8, 2), torch.randn(4, 8)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    workload = load_workload("mypkg.models:build")
    assert estimate(workload, EstimateOptions()).batch_size == 4


def test_explicit_cuda_code_traces_on_meta(tmp_path):
    source = tmp_path / "cuda_model.py"
    source.write_text(
        "import torch\n"
        "from memlint import Workload\n\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(8, 8)\n\n"
        "    def forward(self, x):\n"
        "        return self.lin(x) + torch.zeros(8, device='cuda')\n\n"
        "def build():\n"
        "    model = M().cuda()\n"
        "    return Workload(module=model, make_inputs=lambda b: (torch.randn(b, 8).to('cuda'),), name='cuda')\n")
    result = estimate(load_workload(f"{source}:build"), EstimateOptions(batch_size=2))
    assert result.by_category["parameter"] == (8 * 8 + 8) * 4
