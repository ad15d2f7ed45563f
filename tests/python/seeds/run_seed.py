"""Runs one seed example as one rank, as ../test_seeds.py asks.

    run_seed.py EXAMPLE --expect ok|ERROR_CLASS:TEXT [--compare-world]

Runs EXAMPLE as __main__ (calling its main() if it defines one but does not
call it; see README.md), then checks the outcome: `ok`, or an exception of
class ERROR_CLASS whose message contains TEXT. With --compare-world, the
example's `tensor` after its all_reduce over the world must equal what
torch.distributed's Gloo backend computes from the same input on the same
ranks. Prints "SEED OK <example>" last on success.
"""

import argparse
import os
import re
import runpy
import sys


def main():
    p = argparse.ArgumentParser()
    p.add_argument("example")
    p.add_argument("--expect", default="ok")
    p.add_argument("--compare-world", action="store_true")
    a = p.parse_args()
    name = os.path.basename(a.example)
    with open(a.example) as f:
        src = f.read()
    if "Gangs(...)" in src:
        # The example elides the arguments; its `...` means "some gangs".
        src = src.replace("Gangs(...)", "create_fake_gangs('cpu')")
        src = "from gang import create_fake_gangs\n" + src
    ns = {"__name__": "__main__", "__file__": a.example}
    try:
        exec(compile(src, a.example, "exec"), ns)
        if "main" in ns and not re.search(r"^\s*main\(\)", src, re.M):
            # The tensor is local to the example's function: catch it on
            # its way into the gang's all_reduce.
            captured = {}
            orig = ns["some_distributed_function"]

            def spy(g):
                real = g.all_reduce

                def all_reduce(tensor, *args, **kw):
                    captured["tensor"] = tensor
                    return real(tensor, *args, **kw)

                g.all_reduce = all_reduce
                orig(g)

            ns["some_distributed_function"] = spy
            ns["main"]()
            ns["tensor"] = captured["tensor"]
    except Exception as e:  # noqa: BLE001 - the expectation decides
        if a.expect == "ok":
            raise
        cls, _, text = a.expect.partition(":")
        if type(e).__name__ != cls and cls not in [c.__name__ for c in type(e).__mro__]:
            raise
        if text not in str(e):
            raise AssertionError(f"{name}: expected '{text}' in the message, got: {e}") from e
        print(f"expected error: {type(e).__name__}: {e}")
        print(f"SEED OK {name}")
        return 0
    if a.expect != "ok":
        raise AssertionError(f"{name}: expected {a.expect}, but it ran")
    if a.compare_world:
        compare_world(ns)
    print(f"SEED OK {name}")
    return 0


def compare_world(ns):
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    want = torch.ones((8, 8))
    if world > 1:
        dist.init_process_group("gloo")
        dist.all_reduce(want)
        dist.destroy_process_group()
    got = ns["tensor"]
    assert torch.equal(got, want), f"gang gave {got}, gloo {want}"
    print(f"matches gloo: all_reduce over {world} rank(s) = {want[0, 0].item()}")


if __name__ == "__main__":
    sys.exit(main())
