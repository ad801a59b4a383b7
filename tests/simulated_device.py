"""An accelerator simulated on the CPU, strict about device mixing: CI's stand-in for a GPU.

Tensors "on the accelerator" are `OnDevice` wrappers around ordinary CPU tensors that report the
`meta` device (a real device type that needs no driver, so PyTorch's own bindings accept it).
Every operation checks its tensor arguments the way CUDA kernels do and raises `DeviceMismatch`
when a CPU tensor meets a device tensor (a 0-dim CPU tensor, a scalar in effect, is allowed, as
on a real GPU; so are the CPU lengths of packed sequences). Code that follows the rule "one place
decides the device; every tensor follows the tensors it is given" runs under it unchanged and gives
the CPU's results bit for bit; a tensor built from CPU data without `device=`, or a CPU tensor
indexed by a device index, fails the first time it meets the device, as it would on a GPU.

    with simulated_device() as sim:
        model = build_model(...).to(sim.device)
        decode_all(model, src_ids, cfg, sim.device)
    sim.syncs  # device-to-host reads: .item(), .tolist(), bool(t) of device tensors
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._mode_utils import no_dispatch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

DEVICE = torch.device("meta")
aten = torch.ops.aten


class DeviceMismatch(RuntimeError):
    pass


class OnDevice(torch.Tensor):
    """A CPU tensor that says it lives on the simulated accelerator."""

    elem: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> OnDevice:
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls,
            elem.size(),
            strides=elem.stride(),
            storage_offset=elem.storage_offset(),
            dtype=elem.dtype,
            device=DEVICE,
            requires_grad=elem.requires_grad,
        )
        wrapper.elem = elem
        return wrapper

    def __repr__(self) -> str:
        return f"OnDevice({self.elem!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return NotImplemented  # the active `_Dispatch` mode handles every op


def _on_device(device) -> bool:
    return device is not None and torch.device(device).type == DEVICE.type


# ops that take CPU tensors beside device ones by design (the lengths / batch sizes of packed
# sequences), with the output position they leave on the CPU
_CPU_ARGS_ALLOWED = {
    aten._pack_padded_sequence.default,
    aten._pad_packed_sequence.default,
    aten.gru.data,
    aten.lstm.data,
}
_CPU_OUTPUT = {aten._pack_padded_sequence.default: 1, aten._pad_packed_sequence.default: 1}


class _Dispatch(TorchDispatchMode):
    """Runs every op on the CPU tensors inside, checking and propagating the simulated device."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self.sim = sim

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        on_device: list[bool] = []
        cpu_dims: list[int] = []
        described: list[str] = []
        originals: dict[int, OnDevice] = {}  # inner tensor id -> its wrapper

        def unwrap(x):
            if isinstance(x, OnDevice):
                on_device.append(True)
                described.append(f"{DEVICE.type}{list(x.shape)}")
                originals[id(x.elem)] = x
                return x.elem
            if isinstance(x, torch.Tensor):
                on_device.append(False)
                cpu_dims.append(x.dim())
                described.append(f"{x.device.type}{list(x.shape)}")
            return x

        wrapped = (args, kwargs)
        args, kwargs = tree_map(unwrap, (args, kwargs))
        if torch.Tag.inplace_view in func.tags and on_device and on_device[0]:
            # transpose_, unsqueeze_, ...: change the CPU tensor, then the wrapper's own metadata
            # (its meta kernel, with this mode and the wrapper's dispatch out of the way)
            func(*args, **kwargs)
            with no_dispatch():
                return func(*wrapped[0], **wrapped[1])
        # a target device: a `device=` keyword (factories, _to_copy) or positional (aten.to.device)
        target = kwargs.get("device", next((a for a in args if isinstance(a, torch.device)), None))
        to_device = _on_device(target)
        if to_device:
            kwargs = {k: (torch.device("cpu") if k == "device" else v) for k, v in kwargs.items()}
            args = tuple(torch.device("cpu") if isinstance(a, torch.device) else a for a in args)
        if func is aten._local_scalar_dense.default:
            self.sim.syncs += int(on_device[0])
            return func(*args, **kwargs)
        if func.overloadpacket in (aten._to_copy, aten.to):
            result_on_device = to_device or (on_device[0] and target is None)
        elif func is aten.copy_.default:  # copies may cross devices; the result is `self`
            result_on_device = on_device[0]
        else:
            result_on_device = any(on_device) or to_device
            if any(on_device) and any(d > 0 for d in cpu_dims) and func not in _CPU_ARGS_ALLOWED:
                self.sim.mismatches.append(str(func))
                raise DeviceMismatch(
                    f"{func}({', '.join(described)}): a CPU tensor meets a device tensor; on a "
                    "GPU: 'Expected all tensors to be on the same device' or 'indices should be "
                    "either on cpu or on the same device'"
                )
        out = func(*args, **kwargs)
        if not result_on_device:
            return out
        keep_cpu = _CPU_OUTPUT.get(func, -1)

        def rewrap(x, index: int = -2):
            if not isinstance(x, torch.Tensor) or index == keep_cpu:
                return x
            original = originals.get(id(x))  # in-place ops return their argument itself
            return OnDevice(x) if original is None else original

        if isinstance(out, (tuple, list)):
            return type(out)(rewrap(x, i) for i, x in enumerate(out))
        return rewrap(out)


def _targets_device(args, kwargs) -> bool:
    """Does `Tensor.to(...)` move to the device? (a device positional, keyword or tensor)"""
    if "device" in kwargs:
        return _on_device(kwargs["device"])
    for a in args[1:]:
        if isinstance(a, (str, torch.device)):
            return _on_device(a)
        if isinstance(a, torch.Tensor):
            return a.device.type == DEVICE.type
    return False


class _Function(TorchFunctionMode):
    """What must happen before dispatch: moves to the device, reads back, factories from data."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__()
        self.sim = sim

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.to and _targets_device(args, kwargs):
            tensor = args[0]
            if isinstance(tensor, OnDevice):
                return tensor if kwargs.get("dtype") is None else func(*args, **kwargs)
            dtype = kwargs.get("dtype") or next(
                (a for a in args[1:] if isinstance(a, torch.dtype)), None
            )
            with torch._C.DisableTorchFunction():
                inner = tensor.detach().clone() if dtype is None else tensor.detach().to(dtype)
                return OnDevice(inner).requires_grad_(tensor.requires_grad)
        if func in (torch.tensor, torch.as_tensor) and _on_device(kwargs.get("device")):
            with torch._C.DisableTorchFunction():
                return OnDevice(func(*args, **{**kwargs, "device": "cpu"}))
        if func is torch.Tensor.tolist and isinstance(args[0], OnDevice):
            self.sim.syncs += 1
            return args[0].elem.tolist()
        if func is torch.Tensor.pin_memory:
            return args[0]  # page-locking needs a real CUDA runtime
        return func(*args, **kwargs)


class Simulation:
    device = DEVICE

    def __init__(self) -> None:
        self.syncs = 0  # device-to-host reads
        self.mismatches: list[str] = []  # ops that raised DeviceMismatch


_REAL_GENERATOR = torch.Generator


class _Generator(torch.Generator):
    """torch.Generator(device=...) that accepts the simulated device (a CPU generator inside)."""

    def __new__(cls, device="cpu"):
        return _REAL_GENERATOR("cpu" if _on_device(device) else device)


@contextlib.contextmanager
def simulated_device() -> Iterator[Simulation]:
    """Run the block with `Simulation.device` usable as a strict, CPU-backed accelerator."""
    sim = Simulation()
    swap = torch.__future__.get_swap_module_params_on_conversion()
    # module.to(device) swaps parameter contents in place, so tied weights stay tied
    torch.__future__.set_swap_module_params_on_conversion(True)
    torch.Generator = _Generator
    # inference tensors cannot be wrapped as views of normal ones: inference_mode runs as no_grad
    real_inference_mode = torch._C._InferenceMode
    torch._C._InferenceMode = lambda on: torch.no_grad() if on else contextlib.nullcontext()
    try:
        with _Function(sim), _Dispatch(sim):
            yield sim
    finally:
        torch._C._InferenceMode = real_inference_mode
        torch.Generator = _REAL_GENERATOR
        torch.__future__.set_swap_module_params_on_conversion(swap)
