"""int8 translation on the CPU: a model's matrix products with int8 weights (decode.precision=int8).

Dynamic quantization, as CTranslate2's int8 and torch's own `quantize_dynamic` do it: each weight
matrix is stored in int8 with one scale per output row (symmetric, per channel), each input row
is quantized to int8 by its own magnitude at every call (`Int8Product`), the two multiply into
exact int32 sums in torch's int8 GEMM (`torch._int_mm`, oneDNN's kernels on x86; measured with
torch 2.13) and come back in fp32 with the bias added. Both sides use 7 bits, so that
CPUs without VNNI (AVX2 only), whose int8 products pass through saturating int16 sums, sum the
same integers: the same inputs give the same outputs on every x86 CPU. The softmax, the search's
scores, the embeddings, layer norms and recurrent gate functions stay fp32.

Why these ops: `torch._int_mm` is a plain tensor op, with no quantized tensor types, packed
weights or new dependency: `torch.compile` traces it (decode.compile=true with int8 fuses each
product's quantization and scaling around it), and it does the rounding of each row itself
where torch's `quantized::linear_dynamic` (the first version of this module) quantizes a whole
batch with one scale, which took a dozen extra ops a product to undo: on a beam of one sentence
the product was 4x slower than fp32 for a 256 x 256 weight. Should a torch lack `_int_mm`,
`quantize` refuses int8 by name.

`quantize(model)` returns an int8 copy of a model for translation, made in well under a second
(`int8_copy` keeps it for as long as the model's weights do not change; nothing is written to
disk: a checkpoint's weights are the fp32 ones): every `nn.Linear` becomes an `Int8Linear` (its
fp32 weight, the model's own tensor and not a copy, is kept for the code that reads it), and
each decoder is told, so that the products it writes out itself (a recurrent decoder's per-piece
tables and gates, a Transformer's tied output layer, a shortlist's output rows) run in int8 too.
The copy adds its int8 weights to the model's memory, a quarter of the fp32 ones. The search is
the same search over the copy: int8 is a setting, and its BLEU against fp32 is measured
(docs/benchmarks.md). A shortlist's output rows are the int8 layer's own columns (`rows`).

Where nothing needs the fp32 weights, int8 holds its weights instead of them: a Translator that
reads a checkpoint from its directory to decode in int8 makes the model itself int8 and drops the
fp32 weights of its products (`quantize(model, keep_fp32=False)`, `holds_int8_only`). Kept in fp32:
embedding tables (looked up in fp32; a tied output layer multiplies its own int8 copy of their
rows), layer norms, biases, and the whole of a recurrent model (its per-piece tables are built from
the fp32 weights whenever those change). Such a model scores in int8 too: a Transformer's teacher
forcing runs the products of its int8 step.

Such a translator maps its checkpoint's file instead of reading it (`load_checkpoint(mmap=True)`)
and gives each fp32 weight's pages back to the system once its int8 form is made (`give_back`):
the fp32 model is never in memory whole, so loading peaks near the int8 model's size, not the fp32
one's (on a MADLAD-400-3B-shaped T5, docs/pretrained.md). What stays fp32 is then copied out of the
mapping, so that nothing reads the file after loading.
"""

from __future__ import annotations

import copy
import ctypes
import mmap
import sys
import weakref

import torch
from torch import Tensor, nn

from nmt.errors import NMTError
from nmt.models.compiled import sized_by_the_model

# Both sides are rounded to 7 bits (|q| <= 63): an x86 CPU without VNNI (AVX2 only, the first
# AVX-512 ones) multiplies int8 pairs into int16 sums that saturate at 32767, and oneDNN shifts one
# side by 128 to make it unsigned; with 7 bits every pair sum stays below 2 x 191 x 63 = 24066,
# so every CPU sums the same integers exactly (tests: the same outputs limited to AVX2)
LEVELS = 63
ROWS = 4096  # weight rows quantized at a time


class Int8Product:
    """x -> x Wᵀ + b, W (out, in) held in int8 per output row; x (..., in) quantized per row.

    Each row of x is quantized by its own magnitude (as CTranslate2 quantizes its inputs), so a
    row's product depends on that row alone, exactly; the two int8 matrices multiply into exact
    int32 sums (`torch._int_mm`, oneDNN's int8 GEMM), which come back to fp32 times the row's
    and the weight row's scales, with the bias added. A translation still moves a little with
    its batch where the fp32 parts upstream differ in a last bit and a rounding to int8 turns
    that into a step."""

    def __init__(self, weight: Tensor, bias: Tensor | None = None, per_batch: bool = False) -> None:
        """`per_batch`: the weight's rows change from batch to batch (a shortlist's output rows),
        so a compiled step keeps its sizes symbolic; other products are the model's own, sized
        by it (`sized_by_the_model`)."""
        weight = weight.detach()
        self.scales = (weight.abs().amax(dim=1).float() / LEVELS).clamp(min=1e-12)  # (out,)
        # (in, out) in its own row-major memory: as fast as a transposed view of the rows or
        # faster, and `.contiguous()` would keep a one-column view's strides, which oneDNN misreads
        self.weight = torch.empty(weight.size(1), weight.size(0), dtype=torch.int8)
        # rounded ROWS output rows at a time: the fp32 temporaries of a 256k-piece output layer
        # would be 2 GB at once
        for first in range(0, weight.size(0), ROWS):
            rows = weight[first : first + ROWS].float() / self.scales[first : first + ROWS, None]
            self.weight[:, first : first + ROWS].copy_(rows.round_().to(torch.int8).t())
        self.bias = None if bias is None else bias.detach().float()
        self.out_features = weight.size(0)
        for tensor in (self.weight, self.scales, self.bias):
            if tensor is not None and not per_batch:
                sized_by_the_model(tensor)

    def rows(self, ids: Tensor) -> Int8Product:
        """The product with the output rows `ids` (C,) alone (a shortlist's): their int8 columns
        and scales as they are, equal to quantizing those rows of the fp32 weight afresh (each
        row has its own scale), without reading it. Sized per batch, as `per_batch`."""
        rows = Int8Product.__new__(Int8Product)
        rows.weight = self.weight.index_select(1, ids)  # (in, C)
        rows.scales = self.scales.index_select(0, ids)
        rows.bias = None if self.bias is None else self.bias.index_select(0, ids)
        rows.out_features = ids.numel()
        return rows

    def __call__(self, x: Tensor, add: Tensor | None = None) -> Tensor:
        """x (..., in) -> (..., out); `add` (R, out), when given, is added in the same pass (a
        weight made without bias only: a piece table's share of the gates)."""
        flat = x.reshape(-1, x.size(-1)).float().contiguous()  # (R, in): row-major for oneDNN
        # each row's step: its largest magnitude over 63 (a row of zeros gets a tiny one)
        # (abs then amax: torch's inf-norm and aminmax are 10x slower over 320 rows)
        step = flat.abs().amax(dim=1, keepdim=True).clamp_(min=1e-30).div_(LEVELS)  # (R, 1)
        # a division, not a product with the reciprocal: the largest entry lands on 63 exactly
        rows = torch.div(flat, step).round_().to(torch.int8)
        # exact int32 sums, to fp32, scaled in place: each fresh (R, out) buffer costs (a mixed
        # int32 x fp32 product and a fresh sum made 320 x 8000 outputs take 9.8 ms, this 2.7)
        out = torch._int_mm(rows, self.weight).float().mul_(step)
        base = self.bias if add is None else add
        if base is None:
            out.mul_(self.scales)
        else:
            torch.addcmul(base, out, self.scales, out=out)
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


def quantize(model: nn.Module, keep_fp32: bool = True) -> nn.Module:
    """An int8 form of `model` for translation on the CPU (see the module's notes).

    `keep_fp32=True`: a copy, the model left as it was (its fp32 weights shared, not copied).
    `keep_fp32=False`: the model itself is made int8 and its `nn.Linear` layers' fp32 weights are
    dropped, for a translator that decodes in int8 alone (`holds_int8_only`): a Transformer
    then holds a quarter of its product weights' memory. What still needs fp32 keeps it: the
    embedding tables (looked up in fp32; a tied output layer multiplies their int8 rows), layer
    norms and biases, and every weight of a model whose decoder reads fp32 weights while it
    searches (`int8_reads_fp32`: a recurrent decoder's per-piece tables are built from them).
    """
    if next(model.parameters()).device.type != "cpu":
        raise NMTError("decode.precision=int8 runs on the CPU (torch's x86 int8 kernels)")
    if not hasattr(torch, "_int_mm"):
        raise NMTError(
            f"decode.precision=int8 needs torch's int8 GEMM (torch._int_mm), which torch "
            f"{torch.__version__} lacks: use decode.precision=fp32 or bf16"
        )
    if holds_int8(model):
        return model
    if keep_fp32:
        # the copy's modules are new, its fp32 parameters and buffers the model's own
        # (deepcopy's memo): an int8 copy adds its int8 weights, not a second fp32 model (on
        # an NLLB-600M-shaped model, 2.4 GB)
        shared = {id(t): t for t in (*model.parameters(), *model.buffers())}
        model = copy.deepcopy(model, memo=shared)
    model.eval()
    drop = not keep_fp32 and not reads_fp32(model)
    mapped = _file_mappings() if drop else []
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                product = Int8Linear(child)
                if drop:  # at once, layer by layer: the peak stays the fp32 model's
                    give_back(child.weight, mapped)
                    product.weight = None
                    child.weight = None
                setattr(module, name, product)
    if mapped:  # what stays fp32 leaves the file: nothing reads a mapping after loading
        with torch.no_grad():
            for tensor in (*model.parameters(), *model.buffers()):
                if _within(tensor, mapped):
                    tensor.data = tensor.data.clone()
    for module in model.modules():
        if hasattr(module, "use_int8"):  # the decoders' own products (read no dropped weight)
            module.use_int8()
    model.int8_weights = "instead of fp32" if drop else "beside fp32"
    return model


def reads_fp32(model: nn.Module) -> bool:
    """Whether `model`'s int8 form still reads fp32 weights while it searches (a recurrent
    decoder's piece tables and step products, `int8_reads_fp32`): its fp32 weights are kept, and
    its teacher forcing is not its int8 step."""
    return any(getattr(m, "int8_reads_fp32", False) for m in model.modules())


def _file_mappings() -> list[tuple[int, int]]:
    """The address ranges of this process's file mappings (Linux's /proc/self/maps; none
    elsewhere): where a checkpoint read with mmap=True has its tensors."""
    if not sys.platform.startswith("linux"):
        return []
    ranges = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith("/") and fields[4] != "0":
                    start, end = fields[0].split("-")
                    ranges.append((int(start, 16), int(end, 16)))
    except OSError:
        return []
    return ranges


def _within(tensor: Tensor | None, ranges: list[tuple[int, int]]) -> bool:
    if tensor is None or tensor.device.type != "cpu" or not tensor.numel():
        return False
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    return any(low <= start and end <= high for low, high in ranges)


def give_back(weight: Tensor | None, mapped: list[tuple[int, int]]) -> None:
    """Return the memory pages of `weight`, a tensor about to be dropped that lies in a file
    mapping (`mapped`: a checkpoint read with mmap=True), to the system (madvise DONTNEED):
    read once to make its int8 form, its pages would otherwise stay resident as long as any
    other tensor of the file is mapped. Clean pages of a file mapping are read again from the
    file if touched, so this loses nothing; a tensor not in a file mapping is left alone."""
    if not _within(weight, mapped):
        return
    page = mmap.PAGESIZE
    start = -(-weight.data_ptr() // page) * page  # whole pages inside the tensor only
    end = (weight.data_ptr() + weight.numel() * weight.element_size()) // page * page
    if end > start:
        libc = ctypes.CDLL(None)
        libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), 4)  # MADV_DONTNEED


def holds_int8(model: nn.Module) -> bool:
    """Whether `model` is an int8 form made by `quantize` (a copy or the model made int8)."""
    return hasattr(model, "int8_weights")


def holds_int8_only(model: nn.Module) -> bool:
    """Whether `model` was made int8 with its product weights' fp32 dropped (`quantize`)."""
    return getattr(model, "int8_weights", None) == "instead of fp32"


# model -> (what its parameters were, its int8 copy): the copy is made again when a parameter
# changes (a training step between validations, a load), as the recurrent piece tables are
_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def int8_copy(model: nn.Module) -> nn.Module:
    """`quantize(model)`, made once per version of the model's weights; an int8 model itself."""
    if holds_int8(model):
        return model
    versions = [(p.data_ptr(), p._version) for p in model.parameters()]
    held = _COPIES.get(model)
    if held is None or held[0] != versions:
        held = (versions, quantize(model))
        _COPIES[model] = held
    return held[1]
