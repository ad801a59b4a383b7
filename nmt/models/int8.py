"""int8 translation on the CPU: a model's matrix products with int8 weights (decode.precision=int8).

Dynamic quantization, as CTranslate2's int8 and torch's own `quantize_dynamic` do it: each weight
matrix is stored in int8 with one scale per output row (symmetric, per channel), each input row
is quantized to int8 by its own magnitude (`Int8Product`), the product runs in int32 in torch's
x86 kernels (`quantized::linear_dynamic` over fbgemm/oneDNN, in every torch the project
supports, 2.7 to 2.13) and comes back in fp32 with the bias added. Inputs use 7 bits
(`reduce_range`): a CPU without VNNI (AVX2 only) would otherwise saturate some int16 sums, so
the same inputs give the same outputs on every x86 CPU. The softmax, the search's scores, the
embeddings, layer norms and recurrent gate functions stay fp32.

Why these ops: they are torch's own, in every version the project supports, with no new
dependency. torch 2.13 deprecates quantized tensors in favour of the torchao package (a warning
nmt silences where it makes one); should a torch drop them, `quantize` refuses int8 by name.

`quantize(model)` returns an int8 copy of a model for translation, made in well under a second
(`int8_copy` keeps it for as long as the model's weights do not change; nothing is written to
disk: a checkpoint's weights are the fp32 ones): every `nn.Linear` becomes an `Int8Linear` (its
fp32 weight is kept for the code that reads it), and each decoder is told, so that the products
it writes out itself (a recurrent decoder's per-piece tables and gates, a Transformer's tied
output layer, a shortlist's output rows) run in int8 too. The search is the same search over
the copy: int8 is a setting, and its BLEU against fp32 is measured (docs/benchmarks.md).
"""

from __future__ import annotations

import copy
import warnings
import weakref

import torch
from torch import Tensor, nn

from nmt.errors import NMTError


class Int8Product:
    """x -> x Wᵀ + b, W (out, in) held in int8 per output row; x (..., in) quantized per row.

    torch's kernel quantizes its whole input with one scale, so a row's result would depend on
    the other rows of its batch, and one large row would coarsen all the others. Each row is
    divided by its largest magnitude first, and one framing row [1, ..., -1] joins them, so the
    input always spans exactly [-1, 1]: the scale is the same for every call, each row is
    quantized by its own magnitude (as CTranslate2 quantizes its inputs, per row), and its
    product is multiplied back and the bias added in fp32. A row's product depends on that row
    alone, exactly; a translation still moves a little with its batch where the fp32 parts
    upstream differ in a last bit and a rounding to int8 turns that into a step."""

    def __init__(self, weight: Tensor, bias: Tensor | None = None) -> None:
        weight = weight.detach().float()
        scales = (weight.abs().amax(dim=1) / 127).clamp(min=1e-12).double()
        zeros = torch.zeros(weight.size(0), dtype=torch.long)
        with warnings.catch_warnings():  # torch 2.13 deprecates quantized tensors: see the notes
            warnings.filterwarnings("ignore", message=".*quantize_per_channel.*deprecated")
            quantized = torch.quantize_per_channel(weight, scales, zeros, 0, torch.qint8)
        self.packed = torch.ops.quantized.linear_prepack(quantized, None)
        self.bias = None if bias is None else bias.detach().float()
        self.out_features = weight.size(0)
        self.frame = torch.zeros(weight.size(1))
        self.frame[0], self.frame[-1] = 1.0, -1.0

    def __call__(self, x: Tensor, add: Tensor | None = None) -> Tensor:
        """x (..., in) -> (..., out); `add` (R, out), when given, is added in the same pass (a
        weight packed without bias only: a piece table's share of the gates)."""
        flat = x.reshape(-1, x.size(-1)).float().contiguous()
        # the largest magnitude of each row (amax and amin: faster than aminmax or abs here)
        high, low = flat.amax(dim=1, keepdim=True), flat.amin(dim=1, keepdim=True)
        magnitude = torch.maximum(high, low.neg_()).clamp_(min=1e-30)  # (R, 1)
        rows = flat.new_empty(flat.size(0) + 1, flat.size(1))
        # times the reciprocal (faster than a division), clamped: a product may round past 1,
        # and then the range would again depend on the batch
        torch.mul(flat, magnitude.reciprocal(), out=rows[:-1]).clamp_(-1.0, 1.0)
        rows[-1] = self.frame
        out = torch.ops.quantized.linear_dynamic(rows, self.packed, True)[:-1]
        base = self.bias if add is None else add
        out = out.mul_(magnitude) if base is None else torch.addcmul(base, out, magnitude)
        return out.view(*x.shape[:-1], self.out_features)


class Int8Linear(nn.Linear):
    """An `nn.Linear` that multiplies in int8; its fp32 `weight` and `bias` stay readable."""

    def __init__(self, linear: nn.Linear) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.product = Int8Product(linear.weight, linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.product(x)


def quantize(model: nn.Module) -> nn.Module:
    """An int8 copy of `model` for translation on the CPU (see the module's notes)."""
    if next(model.parameters()).device.type != "cpu":
        raise NMTError("decode.precision=int8 runs on the CPU (torch's x86 int8 kernels)")
    if not hasattr(torch.ops.quantized, "linear_dynamic"):
        raise NMTError(
            f"decode.precision=int8 needs torch's quantized ops, which torch {torch.__version__} "
            "lacks: use decode.precision=fp32 or bf16"
        )
    copied = copy.deepcopy(model).eval()
    for module in list(copied.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                setattr(module, name, Int8Linear(child))
    for module in copied.modules():
        if hasattr(module, "use_int8"):  # the decoders' own products
            module.use_int8()
    return copied


# model -> (what its parameters were, its int8 copy): the copy is made again when a parameter
# changes (a training step between validations, a load), as the recurrent piece tables are
_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def int8_copy(model: nn.Module) -> nn.Module:
    """`quantize(model)`, made once per version of the model's weights."""
    versions = [(p.data_ptr(), p._version) for p in model.parameters()]
    held = _COPIES.get(model)
    if held is None or held[0] != versions:
        held = (versions, quantize(model))
        _COPIES[model] = held
    return held[1]
