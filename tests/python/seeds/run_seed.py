"""Runs seed examples as one rank, as ../test_seeds.py asks.

    run_seed.py EXAMPLE --expect ok|ERROR_CLASS:TEXT [--compare-world]
    run_seed.py --batch JSON --gloo-dir DIR

Runs EXAMPLE as __main__ (calling its main() if it defines one but does not
call it; see README.md), then checks the outcome: `ok`, or an exception of
class ERROR_CLASS whose message contains TEXT. With --compare-world, the
example's `tensor` after its all_reduce over the world must equal what
torch.distributed's Gloo backend computes from the same input on the same
ranks. Prints "SEED OK <example>" last on success.

--batch runs a list of them ([{"example", "expect", "compare"}, ...]) one
after the other, each in a process of its own forked from this one after
torch's import (which costs more CPU than most examples), with a gang
run id of its own (GANG_RUN_ID) so that no example's rendezvous meets
another's keys, and a Gloo rendezvous of its own in a file in DIR (the
same directory for every rank, empty at the start). Every rank
runs the same list in the same order. A failed example prints
"SEED FAILED <example>" and the batch goes on; the exit status says
whether any failed.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import traceback


def main():
    p = argparse.ArgumentParser()
    p.add_argument("example", nargs="?")
    p.add_argument("--expect", default="ok")
    p.add_argument("--compare-world", action="store_true")
    p.add_argument("--batch")
    p.add_argument("--gloo-dir", default=tempfile.gettempdir())
    a = p.parse_args()
    if a.batch is not None:
        return run_batch(json.loads(a.batch), a.gloo_dir)
    if a.example is None:
        p.error("an EXAMPLE or --batch is needed")
    return run_one(a.example, a.expect, a.compare_world, None)


def run_batch(specs, gloo_dir):
    import torch  # noqa: F401  (once, before the forks)

    base = os.environ.get("GANG_RUN_ID", "seeds")
    failed = 0
    for i, spec in enumerate(specs):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            rc = 1
            try:
                os.environ["GANG_RUN_ID"] = f"{base}-{i}"
                gloo = os.path.join(gloo_dir, f"gloo-{i}")
                rc = run_one(spec["example"], spec.get("expect", "ok"), spec.get("compare", False), gloo)
            except BaseException:  # noqa: BLE001 - reported, then this process ends
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(rc)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            failed += 1
            print(f"SEED FAILED {os.path.basename(spec['example'])} (wait status {status})", flush=True)
    return 1 if failed else 0


def run_one(example, expect, compare, gloo_file):
    name = os.path.basename(example)
    with open(example) as f:
        src = f.read()
    if "Gangs(...)" in src:
        # The example elides the arguments; its `...` means "some gangs".
        src = src.replace("Gangs(...)", "create_fake_gangs('cpu')")
        src = "from gang import create_fake_gangs\n" + src
    ns = {"__name__": "__main__", "__file__": example}
    try:
        exec(compile(src, example, "exec"), ns)
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
        if expect == "ok":
            raise
        cls, _, text = expect.partition(":")
        if type(e).__name__ != cls and cls not in [c.__name__ for c in type(e).__mro__]:
            raise
        if text not in str(e):
            raise AssertionError(f"{name}: expected '{text}' in the message, got: {e}") from e
        print(f"expected error: {type(e).__name__}: {e}")
        print(f"SEED OK {name}")
        return 0
    if expect != "ok":
        raise AssertionError(f"{name}: expected {expect}, but it ran")
    if compare:
        compare_world(ns, gloo_file)
    print(f"SEED OK {name}")
    return 0


def compare_world(ns, gloo_file):
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    want = torch.ones((8, 8))
    if world > 1:
        if gloo_file is None:
            dist.init_process_group("gloo")
        else:
            rank = int(os.environ["RANK"])
            dist.init_process_group("gloo", init_method=f"file://{gloo_file}", rank=rank, world_size=world)
        dist.all_reduce(want)
        dist.destroy_process_group()
    got = ns["tensor"]
    assert torch.equal(got, want), f"gang gave {got}, gloo {want}"
    print(f"matches gloo: all_reduce over {world} rank(s) = {want[0, 0].item()}")


if __name__ == "__main__":
    sys.exit(main())
