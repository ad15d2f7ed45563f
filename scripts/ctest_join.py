#!/usr/bin/python3
"""Joins the tests several build trees would run into one CTest directory.

usage: ctest_join.py OUT_DIR PREFIX=BUILD_DIR[:CTEST_ARG...] ...

For each PREFIX=BUILD_DIR, the tests `ctest -N CTEST_ARG...` selects in
BUILD_DIR (e.g. `tsan=build/tsan:-L:tsan`) are written to
OUT_DIR/CTestTestfile.cmake as PREFIX/NAME, with their command, working
directory and properties as they are. One `ctest -j N` in OUT_DIR then
schedules every stage's tests together: a stage's last long test no
longer leaves a CPU idle while the next stage waits, and RUN_SERIAL
tests still run with nothing beside them.
"""
import json
import os
import subprocess
import sys


def quote(s):
    s = str(s)
    eq = "="
    while f"]{eq}]" in s:
        eq += "="
    return f"[{eq}[{s}]{eq}]"


def value(v):
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, list):
        return ";".join(str(x).replace(";", "\\;") for x in v)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


# Properties whose values name tests or fixtures of the same build: they
# get the build's prefix too (a RESOURCE_LOCK stays shared by all).
NAMES = {"DEPENDS", "FIXTURES_SETUP", "FIXTURES_CLEANUP", "FIXTURES_REQUIRED"}


def named(prefix, prop):
    v = prop["value"]
    if prop["name"] not in NAMES:
        return v
    return [f"{prefix}/{x}" for x in (v if isinstance(v, list) else [v])]


def tests_of(build, args):
    out = subprocess.run(["ctest", "-N", "--show-only=json-v1", *args],
                         cwd=build, check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)["tests"]


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    out_dir = argv[1]
    lines = ["# Written by scripts/ctest_join.py: do not edit."]
    for spec in argv[2:]:
        prefix, _, rest = spec.partition("=")
        build, *args = rest.split(":")
        if not prefix or not build:
            sys.exit(f"ctest_join.py: '{spec}' is not PREFIX=BUILD_DIR[:ARG]")
        tests = tests_of(build, args)
        if not tests:
            sys.exit(f"ctest_join.py: {build} {' '.join(args)} selects no test")
        for t in tests:
            if "command" not in t:
                sys.exit(f"ctest_join.py: {build}: {t['name']} has no "
                         "command (its executable was not built?)")
            name = quote(f"{prefix}/{t['name']}")
            lines.append(f"add_test({name} " +
                         " ".join(quote(c) for c in t["command"]) + ")")
            props = [f"{p['name']} {quote(value(named(prefix, p)))}"
                     for p in t.get("properties", [])]
            if props:
                lines.append(f"set_tests_properties({name} PROPERTIES " +
                             " ".join(props) + ")")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "CTestTestfile.cmake")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main(sys.argv)
