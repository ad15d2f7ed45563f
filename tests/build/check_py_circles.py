#!/usr/bin/python3
"""Fails if the modules of a Python package import each other in a circle.

Every import of a sibling counts, also one inside a function (a lazy import
is still a dependency, and a circle of them is what makes a module's
behaviour depend on which was imported first). Each module's imports go one
way, so the package reads from the bottom up as the C files do
(docs/architecture.md).

    check_py_circles.py PACKAGE_DIR

prints each circle as "a -> b -> a" and exits 1 if there is one.
"""
import ast
import os
import sys


def init_names(path):
    """The names that the package's __init__.py itself binds at top level."""
    names = set()
    for node in ast.parse(open(path, encoding="utf-8").read(), path).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def sibling_imports(path, package, modules, owned):
    """The modules of the package that the file at path imports. A name the
    package imports that is neither a .py module nor bound by __init__.py is
    a compiled extension (gang._gang): it imports nothing back."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:  # from . import x
                names = [a.name for a in node.names]
            elif node.level == 1:  # from .x import y
                names = [node.module.split(".")[0]]
            elif node.level == 0 and node.module == package:  # from gang import x
                names = [a.name for a in node.names]
            elif node.level == 0 and node.module and node.module.startswith(package + "."):
                names = [node.module.split(".")[1]]
            else:
                continue
            for n in names:
                if n in modules:
                    found.add(n)
                elif n in owned:
                    found.add("__init__")
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == package:
                    found.add(parts[1] if len(parts) > 1 and parts[1] in modules else "__init__")
    return found


def circles(graph):
    """The strongly connected components with more than one module, or a
    module importing itself (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    pkg_dir = sys.argv[1].rstrip("/")
    package = os.path.basename(pkg_dir)
    files = sorted(f for f in os.listdir(pkg_dir) if f.endswith(".py"))
    if not files:
        sys.exit(f"{pkg_dir}: no Python modules")
    modules = {f[:-3] for f in files}
    owned = init_names(os.path.join(pkg_dir, "__init__.py")) if "__init__" in modules else set()
    graph = {m: sibling_imports(os.path.join(pkg_dir, m + ".py"), package, modules, owned)
             for m in modules}
    bad = circles(graph)
    edges = sum(len(v) for v in graph.values())
    if bad:
        for comp in bad:
            members = set(comp)
            for m in comp:
                for w in sorted(graph[m] & members):
                    print(f"{package}/{m}.py -> {package}/{w}.py")
            print("circle: " + " -> ".join(comp + comp[:1]))
        sys.exit(1)
    print(f"{package}: {len(modules)} modules, {edges} imports between them, no circle")


if __name__ == "__main__":
    main()
