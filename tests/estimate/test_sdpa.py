"""SDPA: the backend choice (CPU: against the installed torch; CUDA: the sdp_utils.cpp rules) and each backend's memory."""

import itertools

import pytest
import torch

from memlint.estimate.api import EstimateOptions, estimate
from memlint.estimate.sdpa import (
    CUDA_PRIORITY,
    SdpaCall,
    choose_cpu_backend,
    choose_cuda_backend,
    efficient_backward_scratch,
    flash_backward_scratch,
)
from memlint.estimate.workload import Workload

B, H, L, D = 2, 4, 256, 32
SDPA_ENUM = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}


def _qkv(dtype=torch.float32, device="cpu", heads=H, kv_heads=H, head_dim=D, length=L, kv_length=L):
    q = torch.zeros(B, heads, length, head_dim, dtype=dtype, device=device)
    k = torch.zeros(B, kv_heads, kv_length, head_dim, dtype=dtype, device=device)
    v = torch.zeros(B, kv_heads, kv_length, head_dim, dtype=dtype, device=device)
    return q, k, v


# (dtype, mask kind, dropout, gqa kv heads, head dim of v, causal); SDPA itself rejects is_causal with a mask
CPU_CASES = [case for case in itertools.product(
    (torch.float32, torch.bfloat16, torch.float64), ("none", "bool", "float2d", "float4d_bcast"), (0.0, 0.1),
    (H, 2), (D, D + 8), (False, True)) if not (case[5] and case[1] != "none")]


@pytest.mark.parametrize(("dtype", "mask", "dropout", "kv_heads", "v_dim", "causal"), CPU_CASES[::3])
def test_cpu_choice_matches_the_installed_torch(dtype, mask, dropout, kv_heads, v_dim, causal):
    """memlint's CPU chooser against torch._fused_sdp_choice on real CPU tensors (the modelled torch is installed)."""
    q, k, _ = _qkv(dtype, kv_heads=kv_heads)
    v = torch.zeros(B, kv_heads, L, v_dim, dtype=dtype)
    attn_mask = {"none": None, "bool": torch.ones(L, L, dtype=torch.bool),
                 "float2d": torch.zeros(L, L, dtype=dtype), "float4d_bcast": torch.zeros(B, 1, L, L, dtype=dtype)}[mask]
    gqa = kv_heads != H
    expected = SDPA_ENUM[torch._fused_sdp_choice(q, k, v, attn_mask, dropout, causal, enable_gqa=gqa)]
    assert choose_cpu_backend(SdpaCall(q, k, v, attn_mask, dropout, causal, gqa)) == expected


def test_cuda_priority_order_is_the_installed_torch_default():
    order = [SDPA_ENUM[i] for i in torch._C._get_sdp_priority_order() if i in SDPA_ENUM]
    assert tuple(order) == CUDA_PRIORITY


def _meta_call(dtype, head_dim=D, mask=None, dropout=0.0, causal=False, kv_heads=H, kv_length=L, grad=True):
    q, k, v = (t.requires_grad_(grad) for t in _qkv(dtype, "meta", kv_heads=kv_heads, head_dim=head_dim,
                                                    kv_length=kv_length))
    return SdpaCall(q, k, v, mask, dropout, causal, kv_heads != H)


@pytest.mark.parametrize(("cc", "call", "expected"), [
    ((8, 0), _meta_call(torch.bfloat16), "flash"),
    ((8, 0), _meta_call(torch.float16, head_dim=30), "flash"),        # flash pads the head dim to 8
    ((8, 0), _meta_call(torch.float32), "efficient"),                 # flash needs fp16/bf16
    ((8, 0), _meta_call(torch.float32, head_dim=30), "math"),         # efficient needs head dim % 4 in fp32
    ((7, 0), _meta_call(torch.float16), "efficient"),                 # flash needs sm80
    ((7, 5), _meta_call(torch.bfloat16), "math"),                     # no bf16 below sm80
    ((7, 5), _meta_call(torch.float32, head_dim=30), "efficient"),    # fp32 below sm80: alignment 1
    ((9, 0), _meta_call(torch.bfloat16, mask=torch.zeros(L, L, device="meta", dtype=torch.bfloat16)),
     "efficient"),                                                    # flash takes no mask
    ((9, 0), _meta_call(torch.bfloat16, kv_heads=2), "flash"),        # GQA: flash supports it
    ((8, 0), _meta_call(torch.bfloat16, causal=True, kv_length=L // 2), "efficient"),  # causal, non-square
    ((8, 6), _meta_call(torch.bfloat16, head_dim=200, dropout=0.1), "efficient"),    # sm86 training hd>192
    ((8, 6), _meta_call(torch.bfloat16, head_dim=200, grad=False), "flash"),          # ... only in training
    ((8, 0), _meta_call(torch.bfloat16, head_dim=264), "efficient"),  # > 256: not flash; mem-eff has no limit
    ((8, 0), _meta_call(torch.bfloat16, head_dim=260), "math"),       # ... but needs head dim % 8
])
def test_cuda_choice_follows_sdp_utils(cc, call, expected):
    assert choose_cuda_backend(call, cc) == expected


def test_cudnn_is_preferred_only_with_a_new_cudnn_on_hopper():
    call = _meta_call(torch.bfloat16, head_dim=64)
    assert choose_cuda_backend(call, (9, 0), cudnn_version=None) == "flash"
    assert choose_cuda_backend(call, (9, 0), cudnn_version=91600) == "cudnn"
    assert choose_cuda_backend(call, (9, 0), cudnn_version=91500) == "flash"   # must be newer than 9.15.0
    assert choose_cuda_backend(call, (8, 0), cudnn_version=91600) == "flash"   # sm90/sm100 only


class Attention(torch.nn.Module):
    """x [B, H, L, D] -> causal SDPA of (x * scale) with itself."""

    def __init__(self, head_dim=D):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(head_dim))

    def forward(self, x):
        q = x * self.scale
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)


def _attention(dtype=torch.float32, head_dim=D):
    return Workload(module=Attention(head_dim).to("meta"),
                    make_inputs=lambda b: (torch.randn(b, H, L, head_dim, dtype=dtype),),
                    loss_fn=lambda out, inputs: out.float().pow(2).mean(), name="attention")


def test_flash_keeps_output_and_logsumexp_only():
    """A100, bf16 autocast: flash. Activations of the steady step's first micro-batch, exactly:
    x*scale (fp32, alive as the input of the autocast cast), q (its bf16 cast, saved by flash), out (bf16),
    logsumexp fp32[B,H,L], the RNG seed (uint64[2]) and offset (uint64[]); no [B,H,L,L] matrix."""
    result = estimate(_attention(), EstimateOptions(batch_size=B, precision="amp-bf16", gpu="A100-80GB", steps=2))
    assert result.kernel_choices == {"sdpa:flash": 2}
    elements = B * H * L * D
    assert result.by_module["Attention"] == elements * 4 + elements * 2 + elements * 2 + B * H * L * 4 + 2 * 8 + 8


def test_math_keeps_the_matrix_when_no_fused_kernel_fits():
    """V100 under bf16 autocast: no fused kernel takes bf16 below sm80, so the math path upcasts to fp32 and
    keeps the [B,H,L,L] softmax (fp32) for the backward; under flash no tensor that large exists."""
    matrix = B * H * L * L * 4
    math = estimate(_attention(), EstimateOptions(batch_size=B, precision="amp-bf16", gpu="V100-16GB", steps=2))
    flash = estimate(_attention(), EstimateOptions(batch_size=B, precision="amp-bf16", gpu="A100-80GB", steps=2))
    assert math.kernel_choices == {"sdpa:math": 2}

    def kept_matrices(result):
        return [r for r in result.ledger.records.values()
                if r.category == "activation" and r.step == 1 and r.nbytes >= matrix // 2]

    assert [r.nbytes for r in kept_matrices(math)] == [matrix]
    assert kept_matrices(flash) == []


def test_flash_backward_scratch_sizes():
    q = torch.empty(B, 8, 200, 40, device="meta", dtype=torch.bfloat16)
    k = torch.empty(B, 2, 300, 40, device="meta", dtype=torch.bfloat16)
    scratch = dict((what, n) for n, what in flash_backward_scratch((None, q, k)))
    assert scratch["flash bwd softmax_d"] == B * 8 * 256 * 4
    assert scratch["flash bwd dq_accum"] == B * 256 * 8 * 64 * 4
    assert scratch["flash bwd dk_expanded"] == scratch["flash bwd dv_expanded"] == B * 300 * 8 * 40 * 2


def test_efficient_backward_scratch_sizes():
    q = torch.empty(B, H, L, D, device="meta", dtype=torch.float16)
    scratch = dict((what, n) for n, what in efficient_backward_scratch((None, q), (8, 0)))
    assert scratch == {"efficient bwd delta": B * H * L * 4, "efficient bwd grad_q accumulator": B * L * H * D * 4}


def test_backward_scratch_is_in_the_backward_peak():
    """The flash backward's buffers are transients of category workspace, alive only during that op."""
    result = estimate(_attention(torch.bfloat16), EstimateOptions(batch_size=B, precision="bf16", gpu="H100-80GB"))
    names = {r.op for r in result.ledger.records.values() if r.category == "workspace"}
    assert {"flash bwd softmax_d", "flash bwd dq_accum"} <= names
    assert all(r.died == r.born for r in result.ledger.records.values() if r.op.startswith("flash bwd"))


def _encoder_layer(dim=64, heads=4, seq=64):
    layer = torch.nn.TransformerEncoderLayer(dim, heads, 4 * dim, batch_first=True).to("meta")
    return Workload(module=layer, make_inputs=lambda b: (torch.randn(b, seq, dim),), name="encoder-layer")


def test_attention_inside_composite_modules_is_chosen_at_the_aten_level():
    """nn.TransformerEncoderLayer reaches SDPA through F.multi_head_attention_forward: its calls are counted."""
    a100 = estimate(_encoder_layer(), EstimateOptions(batch_size=2, precision="amp-bf16", gpu="A100-80GB"))
    v100 = estimate(_encoder_layer(), EstimateOptions(batch_size=2, precision="amp-fp16", gpu="V100-16GB"))
    cpu = estimate(_encoder_layer(), EstimateOptions(batch_size=2, device="cpu"))
    assert a100.kernel_choices["sdpa:flash"] == 3
    assert v100.kernel_choices["sdpa:efficient"] == 3
    assert cpu.kernel_choices["sdpa:math"] == 3  # dropout 0.1: the CPU flash kernel refuses dropout


def test_transformers_attention_is_intercepted():
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                        vocab_size=100, max_position_embeddings=64, attention_probs_dropout_prob=0.0)
    with torch.device("meta"):
        model = BertModel(config)
    workload = Workload(module=model, make_inputs=lambda b: {"input_ids": torch.zeros(b, 64, dtype=torch.long)},
                        loss_fn=lambda out, inputs: out.last_hidden_state.float().mean(), name="bert")
    result = estimate(workload, EstimateOptions(batch_size=2, precision="amp-bf16", gpu="A100-80GB"))
    assert result.kernel_choices["sdpa:flash"] == 2 * 3
