"""Fused recurrent kernels: oneDNN on the CPU, cuDNN on CUDA.

``aten::lstm`` (and ``gru``/``rnn_tanh``/``rnn_relu`` on CUDA) is intercepted at
the aten level (an ``AutogradMeta`` kernel registered during the trace by
:mod:`memlint.estimate.emulation`) because the meta device takes PyTorch's
decomposed path, which keeps other tensors than the fused kernels do:

* **CPU** -- ``lstm`` runs oneDNN through ``mkldnn_rnn_layer``, one call per
  layer and direction (``mkldnn_rnn`` in ``aten/src/ATen/native/mkldnn/RNN.cpp``:
  time-major input copy, per-layer outputs concatenated over directions,
  dropout between layers).  The meta kernel of ``mkldnn_rnn_layer`` returns an
  empty workspace; :func:`onednn_lstm_workspace_bytes` gives its size.
  GRU and vanilla RNNs have no oneDNN path in PyTorch: the decomposed trace is
  what the CPU runs.
* **CUDA** -- ``_cudnn_rnn`` keeps a *reserve space* for the backward and uses
  a temporary workspace; cuDNN returns both sizes at run time
  (``cudnnGetRNNTempSpaceSizes``) without documenting a formula.  The reserve
  is modelled as the activations the backward needs (:func:`cudnn_reserve_bytes`,
  an approximation that is reported with the module), the workspace is not
  modelled (reported).
"""

from __future__ import annotations

from memlint.estimate.units import round_up

PAGE = 4096
#: gates per cell: LSTM 4, GRU 3, vanilla RNN 1 (cuDNN and oneDNN cell definitions).
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def good_ld(dim: int, elsize: int = 4) -> int:
    """oneDNN's leading dimension (``rnn_utils::get_good_ld``): 64-byte aligned, not a multiple of 256 elements."""
    ld = round_up(dim, 64 // elsize)
    return ld + 64 // elsize if ld % 256 == 0 else ld


def onednn_lstm_workspace_bytes(time: int, batch: int, input_size: int, hidden: int, elsize: int = 4) -> int:
    """Bytes of the workspace oneDNN keeps for the backward of one LSTM layer and direction.

    elsize: bytes per element of the layer's input (4 float32, 2 bfloat16).
    Layout of ``rnn_utils::set_offsets`` (oneDNN ``src/cpu/rnn/rnn_utils.cpp``):
    page-aligned (4096 B) regions in this order -- gates ``T*B*ld(4H)`` and
    per-step hidden outputs ``T*B*ld(H)`` in the input dtype; layer states
    ``2*(T+1)*B*ld(M)`` and cell states ``2*(T+1)*B*H`` in the input dtype;
    diff layer and diff iter states ``2*(T+1)*B*ld(M)`` and diff cell states
    ``2*(T+1)*B*H`` in float32 (the accumulation type); M = max(I, H), ``2`` =
    layers + 1 for one layer, ``ld`` = :func:`good_ld`.  Checked exactly against
    the workspace ``mkldnn_rnn_layer`` returns with PyTorch 2.13.0+cpu / oneDNN
    v3.12.0 on 75 random shapes, float32 and bfloat16 (a record of ours;
    tests/estimate/test_rnn.py re-measures a sample).
    """
    widest = max(input_size, hidden)
    steps, states = time * batch, 2 * (time + 1) * batch
    regions = [steps * good_ld(4 * hidden, elsize) * elsize, steps * good_ld(hidden, elsize) * elsize,
               states * good_ld(widest, elsize) * elsize, states * hidden * elsize,
               states * good_ld(widest) * 4, states * good_ld(widest) * 4, states * hidden * 4]
    offset = 0
    for size in regions:
        offset = round_up(offset, PAGE) + size
    return round_up(offset, PAGE)


def cudnn_reserve_bytes(mode: str, time: int, batch: int, hidden: int, layers: int, directions: int,
                        elsize: int) -> int:
    """APPROXIMATION of cuDNN's RNN training reserve space (bytes): what its backward must read.

    Per layer, direction and step: the gate activations (``G*H``; G from
    :data:`GATES`) plus the cell state for an LSTM (``H``); plus the outputs of
    every layer but the last (the inputs of the next layer, ``D*H`` per step).
    cuDNN sizes the buffer itself (``cudnnGetRNNTempSpaceSizes``); this is a
    lower bound from the algorithm, not a published figure.
    """
    per_step = GATES[mode] * hidden + (hidden if mode == "lstm" else 0)
    cells = layers * directions * time * batch * per_step
    carried = (layers - 1) * time * batch * directions * hidden
    return (cells + carried) * elsize


def _split_params(params, has_biases: bool):
    stride = 4 if has_biases else 2
    return [params[i:i + stride] for i in range(0, len(params), stride)]


def make_onednn_lstm_kernel(choices):
    """The ``AutogradMeta`` kernel of ``aten::lstm.input`` for the CPU target (oneDNN path of ``mkldnn_rnn``).

    Falls back to the composite (the decomposed path, as the CPU takes it) for
    projections (``proj_size > 0``) or a float64 input, where PyTorch does not use oneDNN.
    """
    import torch  # noqa: PLC0415

    op = torch.ops.aten.lstm.input

    def kernel(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        if len(params) != num_layers * (2 if bidirectional else 1) * (4 if has_biases else 2) \
                or input.dtype == torch.float64 or input.numel() == 0:
            choices["rnn:native (decomposed)"] += 1
            return op.decompose(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                batch_first)
        choices["rnn:onednn lstm"] += 1
        return _onednn_lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)

    return kernel


def _onednn_lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    import torch  # noqa: PLC0415

    directions = 2 if bidirectional else 1
    weights = _split_params(params, has_biases)
    layer_input = input.transpose(0, 1).contiguous() if batch_first else input
    hidden = hx[0].shape[-1]
    h_out, c_out = [], []
    for layer in range(num_layers):
        outputs = []
        for direction in range(directions):
            index = layer * directions + direction
            w_ih, w_hh, *biases = weights[index]
            b_ih, b_hh = biases if has_biases else (w_ih.new_zeros(4 * hidden), w_ih.new_zeros(4 * hidden))
            out, h, c, _ = torch.ops.aten.mkldnn_rnn_layer(
                layer_input, w_ih, w_hh, b_ih, b_hh, hx[0][index], hx[1][index], direction == 1, [], 2,
                hidden, 1, has_biases, bidirectional, False, train)
            outputs.append(out)
            h_out.append(h)
            c_out.append(c)
        layer_input = torch.cat(outputs, -1) if directions == 2 else outputs[0]
        if dropout and train and layer < num_layers - 1:
            layer_input = torch.nn.functional.dropout(layer_input, dropout, train)
    output = layer_input.transpose(0, 1) if batch_first else layer_input
    return output, torch.stack(h_out), torch.stack(c_out)


def onednn_workspace_handler(args, outputs):
    """Replace the empty workspace the meta ``mkldnn_rnn_layer`` returns by one of the modelled size.

    args: the op's arguments (input [T, B, I], w_ih [4H, I], ...); outputs:
    (output, hy, cy, workspace).  Returns the outputs to hand back to autograd
    (which saves the workspace for the backward, as on the CPU), and a note
    for a dtype other than float32/bfloat16 (the layout was measured for those).
    """
    import torch  # noqa: PLC0415

    layer_input, w_ih = args[0], args[1]
    time, batch, input_size = layer_input.shape
    hidden = w_ih.shape[0] // 4
    nbytes = onednn_lstm_workspace_bytes(time, batch, input_size, hidden, layer_input.element_size())
    workspace = torch.empty(nbytes, dtype=torch.uint8, device=layer_input.device)
    note = "" if layer_input.dtype in (torch.float32, torch.bfloat16) else (
        f"oneDNN LSTM workspace for {layer_input.dtype}: layout measured for float32 and bfloat16 only")
    return (outputs[0], outputs[1], outputs[2], workspace), note


def make_cudnn_rnn_kernel(mode: str, choices, note_unmodelled):
    """The ``AutogradMeta`` kernel of ``aten::<mode>.input`` for a CUDA target (cuDNN RNN).

    cuDNN is used as ``cudnn_is_acceptable`` allows (float16/32/64 inputs);
    anything else (bfloat16) takes the composite, as on CUDA.
    """
    import torch  # noqa: PLC0415

    op = getattr(torch.ops.aten, mode).input

    def kernel(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        if input.dtype not in (torch.float16, torch.float32, torch.float64) or input.numel() == 0:
            choices["rnn:native (decomposed)"] += 1
            return op.decompose(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                batch_first)
        choices[f"rnn:cudnn {mode}"] += 1
        note_unmodelled("cuDNN RNN: reserve space approximated (cudnn_reserve_bytes), workspace not modelled"
                        + ("; dropout state not modelled" if dropout and train and num_layers > 1 else ""))
        spec = (mode, num_layers, bidirectional, batch_first, train)
        hx_list = hx if isinstance(hx, (list, tuple)) else [hx]
        cx = hx_list[1] if mode == "lstm" else None
        outputs = _cudnn_function().apply(spec, input, hx_list[0], cx, *params)
        return outputs if mode == "lstm" else outputs[:2]

    return kernel


_CUDNN_FUNCTION = None


def _cudnn_function():
    """An autograd.Function with the memory of ``_cudnn_rnn`` and its backward (built once, needs torch)."""
    global _CUDNN_FUNCTION
    if _CUDNN_FUNCTION is not None:
        return _CUDNN_FUNCTION
    import torch  # noqa: PLC0415

    class CudnnRnn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, spec, input, hx, cx, *weights):
            mode, layers, bidirectional, batch_first, train = spec
            directions = 2 if bidirectional else 1
            time, batch = (input.shape[1], input.shape[0]) if batch_first else (input.shape[0], input.shape[1])
            hidden = hx.shape[-1]
            shape = (batch, time, directions * hidden) if batch_first else (time, batch, directions * hidden)
            output = input.new_empty(shape)
            hy = hx.new_empty(hx.shape)
            cy = cx.new_empty(cx.shape) if cx is not None else hx.new_empty(0)
            reserve = input.new_empty(
                cudnn_reserve_bytes(mode, time, batch, hidden, layers, directions, input.element_size())
                if train else 0, dtype=torch.uint8)
            ctx.has_cx = cx is not None
            ctx.save_for_backward(input, hx, cx if cx is not None else hy.new_empty(0), output, reserve, *weights)
            return output, hy, cy

        @staticmethod
        def backward(ctx, grad_output, grad_hy, grad_cy):
            input, hx, cx, _, _, *weights = ctx.saved_tensors
            grad_weights = input.new_empty(sum(w.numel() for w in weights), dtype=weights[0].dtype)
            views, offset = [], 0
            for weight in weights:
                views.append(grad_weights[offset:offset + weight.numel()].view(weight.shape))
                offset += weight.numel()
            grad_cx = torch.empty_like(cx) if ctx.has_cx else None
            return (None, torch.empty_like(input), torch.empty_like(hx), grad_cx, *views)

    _CUDNN_FUNCTION = CudnnRnn
    return CudnnRnn
