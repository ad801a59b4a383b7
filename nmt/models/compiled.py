"""The model's step through torch.compile (decode.compile=true).

What is compiled is each decoder's `advance`, the arithmetic of the search's one call into the
model per step: the embedding, every layer, the output layer (in an ensemble, each member's; the
members' combination stays eager). The state's bookkeeping (a new state object, the reorder's
spare buffers) and the search around the step stay eager: log-softmax, the step rules, top-k and
the reordering of states change with each step's outcome, and a compiled region that had to
guard on them would recompile (compiling the whole `decode_step` made more than 8 graphs per
model: its spare buffers and the strides of gathered tensors travelled through the graph).

Shapes are dynamic (`dynamic=True`): one graph serves every batch size, beam width, source length
and position, except that torch specialises sizes of 1 (one sentence, a beam's first step), so a
model has a few graphs. The model's own sizes (its parameters', and those of the tensors made
from them: `sized_by_the_model`) are constants in a graph, so that its kernels are written for
them. For a compiled step the search preallocates the Transformer's self-attention caches to the
batch's length limit (`init_state(encoded, steps)`), so a step writes one position in place and
never grows them. Parameters are inputs of the graph (torch inlines nn modules), so a model whose
weights change (validation inside training) or another model of the same architecture reuses it.

With decode.precision=int8 the int8 copy's step is compiled: its products (`torch._int_mm` and
the quantization of each input row, nmt/models/int8.py) are plain tensor ops, so the rounding,
scaling and bias of each product fuse with the layer norms and attention around them; what that
saves is the Python and the small kernels between products, which is most of a step for one
sentence and little of it for a batch of 64 (docs/benchmarks.md).

The arithmetic is eager's, fused: the same tokens, scores equal to float rounding
(tests/test_compiled.py). Compiling costs tens of seconds on a CPU at the first search of each
kind (`Translator.warm_up` pays it at load), and on a CPU torch's inductor writes C++, so a C++
compiler must be installed: `check_compile` says so before any work.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator

import torch
import torch.fx.experimental._config
from torch import Tensor

from nmt.errors import NMTError

# graphs one function may have before torch falls back to running it eagerly: a model has one per
# strategy and kind of batch (one sentence or several, first step or not, a shortlist or not), so
# torch's default of 8 is reached by a server that runs greedy and beam search
GRAPHS = 64
# every size symbolic, not only those seen to change (`dynamic=True` leaves the sizes inside a
# state's dataclasses static at first), and two sizes that happen to be equal (6 sentences of 6
# pieces) not taken to be the same symbol: without these, most new batches compiled anew. The
# patches are made once: making torch's config patch anew took 0.65 ms, on every step. One
# patch object is not reentrant, hence the lock (searches run one at a time anyway: nmt-serve
# has one decoding thread). A search puts them in force once for all of its steps (`settings`):
# entered and left around each step they took 40 us a step, 5% of a one-sentence search
SHAPES = torch.fx.experimental._config.patch(use_duck_shape=False)
LIMITS = torch._dynamo.config.patch(recompile_limit=GRAPHS, assume_static_by_default=False)
PATCHED = threading.Lock()
_IN_FORCE = threading.local()  # .held: this thread is inside `settings`


@contextlib.contextmanager
def settings() -> Iterator[None]:
    """torch's settings for nmt's compiled steps (`SHAPES`, `LIMITS`), in force inside; entered
    again inside, it does nothing."""
    if getattr(_IN_FORCE, "held", False):
        yield
        return
    with PATCHED, SHAPES, LIMITS:
        _IN_FORCE.held = True
        try:
            yield
        finally:
            _IN_FORCE.held = False


@functools.cache
def compiled(function: Callable) -> Callable:
    """`function` through torch.compile, made once per function (torch keeps its graphs per code
    object, guarded by the shapes and the modules' structure, not by which model it is), called
    as `function` is. A compiler failure is an NMTError that says how to go without."""
    inner = torch.compile(function, dynamic=True)

    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            with settings():
                return inner(*args, **kwargs)
        except torch._dynamo.exc.BackendCompilerFailed as error:
            raise NMTError(
                f"decode.compile=true: torch.compile failed ({error.inner_exception!r}); "
                "decode with decode.compile=false"
            ) from error

    return call


def sized_by_the_model(tensor: Tensor) -> Tensor:
    """`tensor`, marked for torch.compile as sized by the model, not by the batch.

    A compiled step takes every size as symbolic (`SHAPES`, `LIMITS`) except its parameters',
    which torch keeps static. Tensors a model derives from its parameters (an int8 copy's weights,
    a recurrent decoder's piece tables) are plain tensors, so their sizes were symbols too, and
    inductor writes scalar loops over a symbolic feature size: quantizing the rows of a beam's
    cross-attention output (320 x 256) took 0.59 ms a call, a third of the compiled step's own
    kernels, and compiled int8 beam search at batch 64 was slower than eager."""
    torch._dynamo.mark_static(tensor)
    return tensor


def check_compile(device: torch.device) -> None:
    """Raise NMTError if torch.compile cannot build a step on `device`: a CPU needs a C++
    compiler (torch's inductor writes C++ there), a GPU needs CUDA."""
    if device.type not in ("cpu", "cuda"):
        raise NMTError(f"decode.compile=true runs on a CPU or a CUDA GPU, not {device.type}")
    if device.type == "cpu":
        try:
            from torch._inductor.cpp_builder import get_cpp_compiler

            get_cpp_compiler()
        except Exception as error:  # torch raises its own InvalidCxxCompiler, or fails to look
            raise NMTError(
                "decode.compile=true needs a C++ compiler on the CPU (torch.compile writes C++; "
                f"install g++ or set CXX): {error}"
            ) from error
