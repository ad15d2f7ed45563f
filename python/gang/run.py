"""``python3 -m gang.run [gangrun options] program [args]``: gangrun itself.

The launcher is the C program ``gangrun``; this module only finds it and
replaces the Python process with it (same arguments, same environment,
same exit status), the way ``python -m torch.distributed.run`` stands for
torchrun. It looks, in order, at ``GANGRUN`` (a path), the gangrun inside
the package (``pip install .`` puts the tools in gang/bin), the one built
next to it in a build tree, the one installed with it, and PATH (where
pip's ``gangrun`` script, which runs this, is passed over).
"""

import os
import shutil
import sys

__all__ = ["find_gangrun", "main"]


def find_gangrun():
    explicit = os.environ.get("GANGRUN")
    if explicit:
        return explicit
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [
        # pip install: <site-packages>/gang/bin/gangrun
        os.path.join(here, "bin", "gangrun"),
        # build tree: <build>/python/gang -> <build>/tools/gangrun/gangrun
        os.path.join(here, "..", "..", "tools", "gangrun", "gangrun"),
        # installed: <prefix>/lib/python3.X/*-packages/gang -> <prefix>/bin
        os.path.join(here, "..", "..", "..", "..", "bin", "gangrun"),
    ]
    for c in candidates:
        c = os.path.normpath(c)
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which("gangrun")
    if found and os.path.realpath(found) == os.path.realpath(sys.argv[0]):
        return None  # pip's script that runs this module
    return found


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    path = find_gangrun()
    if path is None:
        sys.stderr.write("gang.run: gangrun not found (set GANGRUN or put it on PATH)\n")
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [path] + list(argv))


if __name__ == "__main__":
    sys.exit(main())
