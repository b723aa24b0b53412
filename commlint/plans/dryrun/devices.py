"""The device a GPU program put each tensor on, as the program sees it.

In a dry-run every tensor a program puts on a GPU stays on the CPU (`child.CudaOnCpu`), and
torch itself (its C++ core, its Python code, the dry-run's own code) keeps seeing the CPU: the
whole of torch.distributed, DDP and FSDP run as on a CPU job. The program and the frameworks it
calls see the GPU they asked for: a tensor made with `device="cuda"` (or `cuda:N`, an index),
moved with `.cuda()` / `.to("cuda")` / `module.to(device)` / `module.cuda()`, or computed from
such a tensor reports `cuda:N` in `.device`, `.is_cuda`, `.is_cpu` and `.get_device()`; one
moved back with `.cpu()` / `.to("cpu")` reports the CPU. So a framework's own device check
(accelerate's debug mode: every tensor given to a collective must be on the configured device),
`assert x.is_cuda`, or a branch that picks a collective by device takes the GPU job's path.

What is marked is followed through every torch function the program calls (an output is on the
GPU when an input is, unless the call names the CPU), through `.grad` and `.data`, parameters
made from marked tensors and deep copies. A tensor torch makes inside its own code and hands
back without a torch function call (a bucket view, a DTensor's local shard) reports where its
source is when that is known, otherwise the CPU.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

from commlint.plans.dryrun.unread import OWN_DIRS

GPU = "_commlint_gpu"  # on a tensor: the index of the GPU the program put it on
_tensor = torch._C.TensorBase
DEVICE = _tensor.device.__get__
IS_CUDA = _tensor.is_cuda.__get__
IS_CPU = _tensor.is_cpu.__get__
GET_DEVICE = _tensor.get_device
_DATA_SET = _tensor.data.__set__
QUERIES = (DEVICE, IS_CUDA, IS_CPU, GET_DEVICE)

# any tensor marked yet: a program that never names a GPU pays nothing per call
marked_any = False


def index(t: Any) -> int | None:
    """The GPU index `t` reports, or None for the CPU."""
    try:
        idx = t.__dict__.get(GPU)
    except AttributeError:
        return None
    if idx is None:
        local = getattr(t, "_local_tensor", None)  # a DTensor: where its shard is
        if local is not None:
            return index(local)
    return idx


def mark(t: Any, idx: int | None) -> None:
    global marked_any
    if not isinstance(t, torch.Tensor):
        return
    if idx is None:
        t.__dict__.pop(GPU, None)
        return
    marked_any = True
    t.__dict__[GPU] = idx


def named(device: Any) -> int | bool | None:
    """What a device argument names: a GPU's index, None for the CPU (or another device),
    False when it is not a device at all."""
    if type(device) is int:
        return device
    if isinstance(device, str):
        if device != "cuda" and not device.startswith("cuda:"):
            return None if device in ("cpu", "meta") or device.startswith("cpu:") else False
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "cuda":
            return None
        return torch.cuda.current_device() if device.index is None else device.index
    return False


# torch code that checks the device a GPU job's tensor is on, and sees what the program did:
# SyncBatchNorm's "expected input tensor to be on GPU" (gpu_paths runs its kernels on the CPU)
_SEES_THE_PROGRAMS = (os.path.join("torch", "nn", "modules", "batchnorm.py"),)


def _inside(filename: str) -> bool:
    """Torch's or the dry-run's own code (which sees where tensors really are)."""
    return filename.startswith(OWN_DIRS) and not filename.endswith(_SEES_THE_PROGRAMS)


def answer(func: Any, t: Any) -> Any:
    """`.device`, `.is_cuda`, `.is_cpu`, `.get_device()` of a tensor the program put on GPU
    `idx`, asked from the program's side; NotImplemented when the true answer stands."""
    idx = index(t)
    # asked by the caller of CudaOnCpu.__torch_function__
    if idx is None or _inside(sys._getframe(2).f_code.co_filename):
        return NotImplemented
    if func == DEVICE:
        return torch.device("cuda", idx)
    if func == IS_CUDA:
        return True
    if func == IS_CPU:
        return False
    return idx


def _outputs(out: Any) -> tuple:
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, (tuple, list)):
        return tuple(o for o in out if isinstance(o, torch.Tensor))
    return ()


# Factories: a tensor they make without a device argument is on the CPU
FACTORIES = frozenset(
    getattr(torch, name)
    for name in (
        "tensor", "as_tensor", "from_numpy", "scalar_tensor", "zeros", "ones", "empty", "full",
        "rand", "randn", "randint", "randperm", "arange", "linspace", "eye", "zeros_like",
        "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
    )
)  # fmt: skip
CPU_MADE = "_commlint_cpu"  # on a tensor the program's own code made on (or moved to) the CPU


def made_on_the_cpu(out: Any, caller: Any) -> None:
    """Note a tensor the program's own code (`caller`, the frame that called the torch
    function) made on the CPU (a factory given no device) or moved there (`.cpu()`):
    certainly not on a GPU in the real job, unlike one torch or a framework made, or one
    made with a device the program read from torch (a mesh's `device_type` is "cpu" here,
    "cuda" there): those may be on the GPU there and report the CPU here."""
    from commlint.plans.dryrun.sites import is_user_file

    if not isinstance(out, torch.Tensor) or index(out) is not None:
        return
    if caller is not None and caller.f_code.co_filename == _OVERRIDES:
        caller = caller.f_back  # torch's Python dispatch of a torch function
    if caller is not None and is_user_file(caller.f_code.co_filename):
        out.__dict__[CPU_MADE] = True


_OVERRIDES = torch.overrides.__file__


def on_the_cpu(t: Any) -> bool:
    """A tensor the program's own code made on, or moved to, the CPU, and never moved on."""
    return index(t) is None and t.__dict__.get(CPU_MADE, False)


def place(func: Any, args: tuple, kwargs: dict, out: Any, target: int | bool | None) -> Any:
    """Mark `out` of a torch function call: on the GPU a device argument named (`target`),
    on the CPU when it named the CPU, else where its inputs are."""
    if target is False:
        if not marked_any:
            return out
        if func == _DATA_SET:  # `p.data = t`: p is where t is
            mark(args[0], index(args[1]))
            return out
        idx = None
        for a in (*args, *kwargs.values()):
            if isinstance(a, torch.Tensor):
                idx = a.__dict__.get(GPU)
            elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
                idx = a[0].__dict__.get(GPU)
            if idx is not None:
                break
        if idx is None:
            return out
        inputs = {id(a) for a in args if isinstance(a, torch.Tensor)}
        for o in _outputs(out):
            # an in-place or out= call leaves its target where it was
            if id(o) not in inputs and GPU not in o.__dict__:
                mark(o, idx)
        return out
    if target is None:
        if not marked_any:
            return out
        if isinstance(out, torch.Tensor) and index(out) is not None:
            if any(a is out for a in args):
                # `.cpu()` / `.to("cpu")` of a tensor already on the CPU returns it: the
                # program's copy on the CPU is another tensor (a view of it here)
                out = out.view_as(out)
            mark(out, None)
        return out
    for o in _outputs(out):
        mark(o, target)
    return out


def install() -> None:
    """Parameters and buffers keep the mark of the tensor they are made from; a fake tensor's
    `.device` (a Python property, asked without a torch function call) answers as above."""
    from torch._subclasses.fake_tensor import FakeTensor

    for cls in (torch.nn.Parameter, torch.nn.Buffer):
        _keep_mark(cls)
    prop = FakeTensor.device

    def device(self: Any) -> torch.device:
        idx = self.__dict__.get(GPU)
        if idx is None or _inside(sys._getframe(1).f_code.co_filename):
            return prop.fget(self)
        return torch.device("cuda", idx)

    FakeTensor.device = property(device, prop.fset)  # type: ignore[method-assign]


def _keep_mark(cls: Any) -> None:
    new = cls.__new__

    def made_from(cls: Any, data: Any = None, *a: Any, **k: Any) -> Any:
        made = new(cls, data, *a, **k)
        if marked_any:
            mark(made, index(data))
        return made

    cls.__new__ = made_from
