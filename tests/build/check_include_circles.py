#!/usr/bin/python3
"""Fails if headers of the tree include each other in a circle.

Include guards make a circle compile, but then which declarations a file
sees depends on which header came first; every header's includes go one
way, as the calls between files do (check_call_circles.sh,
docs/architecture.md). A quoted include is looked up beside the including
file, then in each directory given with -I, as the compiler does.

    check_include_circles.py -I DIR [-I DIR ...] ROOT [ROOT ...]

walks each ROOT for .h files, prints each circle as "a -> b -> a" and
exits 1 if there is one.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_py_circles import circles  # noqa: E402  (the same Tarjan)

INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


def headers(roots):
    found = set()
    for root in roots:
        for dirpath, _, names in os.walk(root):
            found.update(os.path.normpath(os.path.join(dirpath, n))
                         for n in names if n.endswith(".h"))
    return found


def edges(path, known, dirs):
    out = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = INCLUDE.match(line)
            if not m:
                continue
            for d in [os.path.dirname(path)] + dirs:
                target = os.path.normpath(os.path.join(d, m.group(1)))
                if target in known:
                    out.add(target)
                    break
    return out


def main(argv):
    dirs, roots = [], []
    i = 0
    while i < len(argv):
        if argv[i] == "-I" and i + 1 < len(argv):
            dirs.append(argv[i + 1])
            i += 2
        else:
            roots.append(argv[i])
            i += 1
    if not roots:
        print(__doc__.strip().splitlines()[-5], file=sys.stderr)
        return 2
    known = headers(roots)
    if not known:
        print("no headers under " + " ".join(roots))
        return 1
    graph = {h: edges(h, known, dirs) for h in known}
    found = circles(graph)
    n = sum(len(e) for e in graph.values())
    if not found:
        print(f"{len(known)} headers, {n} includes between them, no circle")
        return 0
    for comp in found:
        print(" -> ".join(comp + [comp[0]]))
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
