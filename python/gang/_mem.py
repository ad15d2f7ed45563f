"""Arrays and tensors in memory from gang_mem_alloc (docs/python.md,
"Buffers from gang_mem_alloc"): the other ranks of this host read them
directly in collectives, without process_vm_readv or a staging copy."""

import math

from ._gang import Memory


def mem_empty(shape, dtype):
    """Zeros of `shape` (an int or a tuple) and `dtype` in memory from
    gang_mem_alloc: a numpy array for a numpy dtype (or its name), a CPU
    torch tensor for a torch dtype. The memory is freed when the array or
    tensor (and every view of it) is gone."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    n = math.prod(shape)
    if type(dtype).__module__.split(".")[0] == "torch":
        import torch

        size = torch.empty((), dtype=dtype).element_size()
        mem = Memory(max(1, n * size))
        return torch.frombuffer(mem, dtype=dtype, count=n).view(shape)
    import numpy as np

    dt = np.dtype(dtype)
    mem = Memory(max(1, n * dt.itemsize))
    return np.frombuffer(mem, dtype=dt, count=n).reshape(shape)
