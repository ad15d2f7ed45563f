"""PyTorch's DeviceMesh and init_device_mesh over gang_mesh_* (mesh.h).

``get_group`` returns a gang (a ProcessGroupGang, or a FakeGang for a
dimension of size 1) rather than a torch ProcessGroup; everything else has
torch's names, arguments and errors. The mesh is laid out as torch lays it
out: row-major, the group of dimension d varies coordinate d.
"""

import sys
import threading
import warnings

from . import _gang
from ._core import FakeGang, ProcessGroupGang, get_world_gang
from ._gang import InvalidArgumentError

__all__ = ["DeviceMesh", "init_device_mesh"]


def _nested(flat, shape):
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0]
    return [_nested(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _flatten_ranks(mesh):
    """(flat ranks, shape) of a nested list, numpy array or tensor."""
    if hasattr(mesh, "tolist"):
        mesh = mesh.tolist()
    shape = []
    level = mesh
    while isinstance(level, (list, tuple)):
        shape.append(len(level))
        level = level[0] if level else None
    flat = []

    def walk(x):
        if isinstance(x, (list, tuple)):
            for y in x:
                walk(y)
        else:
            flat.append(int(x))

    walk(mesh)
    return flat, tuple(shape)


class DeviceMesh:
    """An n-dimensional named grid of ranks with one gang per dimension."""

    _tls = threading.local()

    def __init__(self, device_type, mesh, *, mesh_dim_names=None, _gang_over=None, _handle=None, _root=None):
        self.device_type = device_type
        self._root = _root if _root is not None else self
        if _handle is None:
            flat, shape = _flatten_ranks(mesh)
            if mesh_dim_names is not None and len(mesh_dim_names) != len(shape):
                raise RuntimeError("mesh_shape and mesh_dim_names should have same length!")
            world = _gang_over if _gang_over is not None else get_world_gang()
            _handle = _gang.mesh_create(world, shape, mesh_dim_names, flat)
            self._gang = world
        else:
            self._gang = _gang_over
        self._m = _handle
        info = _handle.info()
        self._shape = info["shape"]
        self.mesh_dim_names = info["names"]
        self._coordinate = info["coordinate"]
        self._ranks = info["ranks"]
        self._groups = {}

    # ---- shape -------------------------------------------------------------
    @property
    def mesh(self):
        ranks = self._ranks if self._ranks is not None else [-1] * self.size()
        try:
            import numpy

            return numpy.array(ranks, dtype=numpy.int32).reshape(self._shape)
        except ImportError:
            return _nested(ranks, self._shape)

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def shape(self):
        return tuple(self._shape)

    def size(self, mesh_dim=None):
        if mesh_dim is None:
            n = 1
            for s in self._shape:
                n *= s
            return n
        return self._shape[self._dim_index(mesh_dim)]

    # ---- groups ------------------------------------------------------------
    def _dim_index(self, mesh_dim):
        if isinstance(mesh_dim, int):
            return mesh_dim
        if self.mesh_dim_names is None or mesh_dim not in self.mesh_dim_names:
            raise KeyError(f"Mesh dimension '{mesh_dim}' does not exist.")
        return self.mesh_dim_names.index(mesh_dim)

    def _wrap_group(self, key, make):
        g = self._groups.get(key)
        if g is None:
            g = make(ProcessGroupGang)
            if g is not None and g.size == 1:
                g = make(FakeGang)
            self._groups[key] = g
        return g

    def get_group(self, mesh_dim=None):
        """The gang of dimension ``mesh_dim`` (index or name) that holds
        this rank (gang_mesh_group / gang_mesh_group_at)."""
        if mesh_dim is None and self.ndim != 1:
            raise RuntimeError(
                f"Found the DeviceMesh have {self.ndim} dimensions. Optional kwarg `mesh_dim` needs to be specified when device_mesh.ndim > 1."
            )
        if isinstance(mesh_dim, str) and (self.mesh_dim_names is None or mesh_dim not in self.mesh_dim_names):
            root = self._root
            if mesh_dim not in getattr(root, "_flattened", {}):
                raise KeyError(f"Mesh dimension '{mesh_dim}' does not exist.")
        try:
            return self._wrap_group(mesh_dim, lambda t: self._m.group(mesh_dim, t))
        except InvalidArgumentError as e:
            raise KeyError(f"Mesh dimension '{mesh_dim}' does not exist.") from e

    def get_all_groups(self):
        return [self.get_group(i) for i in range(self.ndim)]

    def get_rank(self):
        """This process's rank in the world (not in the mesh)."""
        return self._gang.rank if self._gang is not None else -1

    def get_local_rank(self, mesh_dim=None):
        """This rank's coordinate along ``mesh_dim`` (gang_mesh_local_rank)."""
        if mesh_dim is None and self.ndim != 1:
            raise RuntimeError("Optional kwarg `mesh_dim` needs to be specified when device_mesh.ndim > 1.")
        if isinstance(mesh_dim, int):
            coord = self.get_coordinate()
            return coord[mesh_dim] if coord is not None else -1
        return self._m.local_rank(mesh_dim)

    def get_coordinate(self):
        """This rank's coordinate, or None outside the mesh
        (gang_mesh_coordinate)."""
        return None if self._coordinate is None else list(self._coordinate)

    # ---- slicing and flattening ---------------------------------------------
    def __getitem__(self, mesh_dim_names):
        if self.mesh_dim_names is None:
            raise RuntimeError("Cannot slice a DeviceMesh without mesh_dim_names!")
        names = (mesh_dim_names,) if isinstance(mesh_dim_names, str) else tuple(mesh_dim_names)
        if names == tuple(self.mesh_dim_names):
            return self
        flattened = getattr(self._root, "_flattened", {})
        for n in names:
            if n not in self.mesh_dim_names and n not in flattened:
                raise KeyError(
                    f"Invalid mesh_dim_names {names} specified. Valid mesh_dim_names are {self.mesh_dim_names}."
                )
        if len(names) == 1 and names[0] in flattened:
            return flattened[names[0]]
        idx = [self.mesh_dim_names.index(n) for n in names]
        if idx != sorted(idx):
            raise KeyError(
                f"Invalid mesh_dim_names {names} specified. Mesh dim indices should be in ascending order."
            )
        return DeviceMesh(self.device_type, None, _gang_over=self._gang, _handle=self._m.slice(names), _root=self._root)

    def _flatten(self, mesh_dim_name=None):
        """One gang over all of this mesh's dimensions, registered on the
        root under ``mesh_dim_name`` (gang_mesh_flatten). Collective."""
        if self.mesh_dim_names is None:
            raise RuntimeError("Cannot flatten a DeviceMesh without mesh_dim_names!")
        name = mesh_dim_name or "_".join(self.mesh_dim_names)
        flattened = self._root.__dict__.setdefault("_flattened", {})
        if name in flattened:
            return flattened[name]
        if self._root is not self and name in (self._root.mesh_dim_names or ()):
            raise ValueError(f"{name} already exists for submesh of the {self._root}.")
        g = self._m.flatten(name, ProcessGroupGang)
        mesh = DeviceMesh(
            self.device_type,
            None,
            _gang_over=self._gang,
            _handle=_gang.mesh_create(g, (g.size,) if g is not None else (self.size(),), (name,), None),
            _root=self._root,
        )
        flattened[name] = mesh
        return mesh

    # ---- context manager (thread-local current mesh) --------------------------
    def __enter__(self):
        stack = DeviceMesh._tls.__dict__.setdefault("stack", [])
        stack.append(self)
        return self

    def __exit__(self, *exc):
        DeviceMesh._tls.stack.pop()

    @staticmethod
    def get_current_mesh():
        stack = DeviceMesh._tls.__dict__.get("stack")
        if not stack:
            raise RuntimeError("No device mesh is currently active!")
        return stack[-1]

    def __repr__(self):
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        return f"DeviceMesh('{self.device_type}', {self.mesh.tolist() if hasattr(self.mesh, 'tolist') else self.mesh}{names})"


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None):
    """torch's init_device_mesh over the world gang (gang_mesh_create):
    creates the world gang from the environment if none exists yet."""
    if mesh_dim_names is not None:
        if len(set(mesh_dim_names)) != len(mesh_dim_names):
            raise RuntimeError("Each mesh_dim_name must be unique.", f"Found repeated mesh_dim_name in mesh_dim_names {mesh_dim_names}")
        if len(mesh_shape) != len(mesh_dim_names):
            raise RuntimeError(
                "mesh_shape and mesh_dim_names should have same length!",
                f"Found len(mesh_dim_names): {len(mesh_dim_names)} and len(mesh_shape):{len(mesh_shape)}.",
            )
    if not device_type.isalpha():
        raise RuntimeError(
            f"Device type with index is not supported but got {device_type}. ",
            "If you maintained a 'torch.device' object, it's recommended to pass in 'device.type'.",
        )
    if device_type == "cuda":
        torch = sys.modules.get("torch")
        if torch is None or not torch.cuda.is_available():
            # Said, not refused: torch's own examples name "cuda", and gang
            # moves CPU memory either way.
            warnings.warn(
                "init_device_mesh('cuda', ...): no CUDA device here"
                + ("" if torch is not None else " (torch is not loaded)")
                + "; the mesh's gangs move CPU memory (pass 'cpu' to say so)", RuntimeWarning, stacklevel=2)
    world = get_world_gang()
    handle = _gang.mesh_create(world, tuple(mesh_shape), tuple(mesh_dim_names) if mesh_dim_names else None, None)
    return DeviceMesh(device_type, None, _gang_over=world, _handle=handle)
