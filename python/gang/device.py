"""Devices without importing torch.

fairseq2 passes ``torch.device`` objects around. ``Device`` here is a ``str``
subclass ("cpu", "cuda:0") with torch.device's ``type`` and ``index``
attributes, so the same value can be handed to torch (``torch.ones(...,
device=d)`` accepts a string) and to gang, and the core package never needs
torch. Anything with ``.type`` and ``.index`` (a real ``torch.device``) is
accepted wherever gang takes a device.
"""

import os

__all__ = ["Device", "get_default_device", "CPU"]


class Device(str):
    """A device name with ``type`` and ``index``, e.g. ``Device("cuda:1")``."""

    def __new__(cls, spec="cpu", index=None):
        if not isinstance(spec, str):  # torch.device or another Device
            index = getattr(spec, "index", None) if index is None else index
            spec = spec.type
        kind, _, idx = spec.partition(":")
        if index is None and idx:
            index = int(idx)
        if kind not in ("cpu", "cuda", "meta"):
            raise ValueError(
                f"`device` must be of type `cpu` or `cuda`, but is of type `{kind}` instead."
            )
        self = super().__new__(cls, kind if index is None else f"{kind}:{index}")
        self.type = kind
        self.index = index
        return self

    def __repr__(self):
        return f"Device({str.__repr__(str(self))})"


CPU = Device("cpu")


def get_default_device():
    """fairseq2's get_default_device without torch: ``FAIRSEQ2_DEVICE`` or
    ``GANG_DEVICE`` if set, else the CPU (gang moves CPU memory)."""
    spec = os.environ.get("GANG_DEVICE") or os.environ.get("FAIRSEQ2_DEVICE")
    return Device(spec) if spec else CPU


def as_device(device):
    """Device of anything gang accepts (None = CPU)."""
    if device is None:
        return CPU
    if isinstance(device, Device):
        return device
    return Device(device)
