"""``python3 -m gang.info [--json]``: which gang this Python runs.

Prints the package's version and where it was imported from, the libgang
it loaded (path and version) and the version its extension was compiled
against, the gangrun and gang-baby it would start, and whether the
torch.distributed backend is there -- without importing torch. Exits 1 when
the versions disagree (an extension built for one libgang loading another).
"""

import importlib.metadata
import importlib.util
import json
import os
import sys

from . import _gang
from .run import find_gangrun

__all__ = ["info", "main"]


def _loaded_library():
    """The path of the libgang.so this process mapped, or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if os.path.basename(path).startswith("libgang.so"):
                    return path
    except OSError:
        pass
    return None


def _gang_baby(library):
    """Where gang_baby_create would find gang-baby: GANG_BABY_PATH, the
    installed libexec path, or beside the library (src/ft/baby_proc.c)."""
    explicit = os.environ.get("GANG_BABY_PATH")
    if explicit:
        return explicit
    if library is None:
        return None
    libdir = os.path.dirname(library)
    for c in (os.path.join(libdir, "gang-baby"),
              os.path.join(libdir, "..", "libexec", "gang", "gang-baby"),
              os.path.join(libdir, "..", "..", "libexec", "gang", "gang-baby"),
              os.path.join(libdir, "..", "tools", "gang-baby", "gang-baby")):
        c = os.path.normpath(c)
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _distribution_version():
    try:
        return importlib.metadata.version("gang")
    except importlib.metadata.PackageNotFoundError:
        return None


def info():
    """What main prints, as a dict."""
    here = os.path.dirname(os.path.abspath(__file__))
    library = _loaded_library()
    torch_ext = [f for f in os.listdir(here) if f.startswith("_gang_torch")]
    return {
        "version": _gang.__version__,
        "package": here,
        "installed_by_pip": _distribution_version(),
        "library": library,
        "library_version": _gang.__version__,
        "extension_built_with": _gang._built_with,
        "gangrun": find_gangrun(),
        "gang_baby": _gang_baby(library),
        "torch_backend": bool(torch_ext),
        "torch_found": importlib.util.find_spec("torch") is not None,
        "python": sys.version.split()[0],
    }


def _consistent(d):
    versions = {d["library_version"], d["extension_built_with"]}
    if d["installed_by_pip"] is not None:
        versions.add(d["installed_by_pip"])
    return len(versions) == 1


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    d = info()
    if "--json" in argv:
        print(json.dumps(d, indent=2))
    else:
        print(f"gang {d['version']} (python {d['python']})")
        print(f"  package:          {d['package']}")
        pip = d["installed_by_pip"]
        print(f"  installed by pip: {pip if pip else 'no'}")
        print(f"  libgang:          {d['library'] or '?'} ({d['library_version']})")
        print(f"  extension built against {d['extension_built_with']}")
        print(f"  gangrun:          {d['gangrun'] or 'not found'}")
        print(f"  gang-baby:        {d['gang_baby'] or 'not found'}")
        backend = "yes" if d["torch_backend"] else "no (built without torch)"
        if d["torch_backend"] and not d["torch_found"]:
            backend = "built, but torch is not importable"
        print(f"  torch backend:    {backend}")
    if not _consistent(d):
        sys.stderr.write("gang.info: the versions above disagree\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
