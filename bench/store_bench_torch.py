#!/usr/bin/python3
"""torch c10d TCPStore throughput, measured the way `gang-store bench` does.

N concurrent clients, each its own TCPStore connection, run one op in a
loop; the total op count is split evenly among them. Reported: ops/s over
the timed region (from the moment all clients are connected and released
to the moment the last one finishes) and the p50/p99 latency of single ops.

  set: each client sets its own key "bench/c<i>" to a value of --value-size
       (torch's set has no reply: its latency is the time to send; the
       timed region ends with one round trip per client, so ops/s counts
       sets the server has applied)
  get: each client gets its own key (set beforehand)
  wait: each client waits for its own key (set beforehand): one round
       trip that returns at once
  add: every client adds 1 to the shared key "bench/ctr" (checked at the
       end: it must equal the total op count)

The server is a TCPStore master in this process (its daemon is a C++ thread,
as gang's --embedded server is a thread of the bench process). Clients are
threads spread over --procs worker processes, so that Python's GIL (held
between calls) is not the only thing measured. Prints one JSON line in the
format of `gang-store bench --json`.

usage: store_bench_torch.py --clients N --ops N --op set|get|add|wait
                            [--value-size B] [--procs P]
"""
import argparse
import json
import multiprocessing as mp
import resource
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

TIMEOUT = timedelta(seconds=120)


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


def worker(port, op, value, client_ids, nops, ready, go, out):
    """One process: a thread per client, each with its own connection."""
    raise_nofile(len(client_ids) + 64)
    stores = [dist.TCPStore("127.0.0.1", port, is_master=False,
                            timeout=TIMEOUT, wait_for_workers=False)
              for _ in client_ids]
    if op in ("get", "wait"):
        for cid, st in zip(client_ids, stores):
            st.set("bench/c%d" % cid, value)
    lats = [None] * len(client_ids)
    errors = []

    def run(k, cid, st, n):
        key = "bench/c%d" % cid
        lat = [0] * n
        now = time.perf_counter_ns
        try:
            if op == "set":
                for i in range(n):
                    t0 = now()
                    st.set(key, value)
                    lat[i] = now() - t0
                # TCPStore's set is not acknowledged (the server sends no
                # reply), so the loop above only measures sending. One
                # round trip on the same connection at the end waits until
                # the server has applied every set, so the timed region
                # covers the work done, as gang's acknowledged set does.
                st.num_keys()
            elif op == "get":
                for i in range(n):
                    t0 = now()
                    st.get(key)
                    lat[i] = now() - t0
            elif op == "wait":
                keys = [key]
                for i in range(n):
                    t0 = now()
                    st.wait(keys)
                    lat[i] = now() - t0
            else:
                for i in range(n):
                    t0 = now()
                    st.add("bench/ctr", 1)
                    lat[i] = now() - t0
        except Exception as e:  # reported to the parent
            errors.append("client %d: %r" % (cid, e))
        lats[k] = lat

    gate = threading.Barrier(len(client_ids) + 1)

    def gated(*a):
        gate.wait()
        run(*a)

    threads = [threading.Thread(target=gated, args=(k, cid, st, nops[k]))
               for k, (cid, st) in enumerate(zip(client_ids, stores))]
    for t in threads:
        t.start()
    ready.put(1)
    go.wait()
    start = time.monotonic()
    gate.wait()
    for t in threads:
        t.join()
    end = time.monotonic()
    flat = [x for lat in lats for x in lat]
    out.put((start, end, flat, errors))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--ops", type=int, default=100000)
    ap.add_argument("--op", choices=["set", "get", "add", "wait"], default="set")
    ap.add_argument("--value-size", type=int, default=32)
    ap.add_argument("--procs", type=int, default=0,
                    help="worker processes (default min(clients, 8))")
    a = ap.parse_args()
    if a.ops < a.clients:
        ap.error("--ops (the total) must be at least --clients")
    procs = a.procs or min(a.clients, 8)
    procs = min(procs, a.clients)
    raise_nofile(a.clients + 256)

    master = dist.TCPStore("127.0.0.1", 0, None, True, TIMEOUT,
                           wait_for_workers=False)
    port = master.port
    master.delete_key("bench/ctr") if a.op == "add" else None
    value = b"v" * a.value_size

    ctx = mp.get_context("fork")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    ids = list(range(a.clients))
    ps = []
    for p in range(procs):
        mine = ids[p::procs]
        nops = [a.ops // a.clients + (1 if c < a.ops % a.clients else 0)
                for c in mine]
        pr = ctx.Process(target=worker, args=(port, a.op, value, mine, nops,
                                              ready, go, out))
        pr.start()
        ps.append(pr)
    for _ in ps:
        ready.get(timeout=300)
    go.set()
    results = [out.get(timeout=600) for _ in ps]
    for pr in ps:
        pr.join()
    errors = [e for r in results for e in r[3]]
    if errors:
        print("store_bench_torch: " + "; ".join(errors[:5]), file=sys.stderr)
        return 1
    secs = max(r[1] for r in results) - min(r[0] for r in results)
    lat = sorted(x for r in results for x in r[2])
    if a.op == "add":
        got = int(master.get("bench/ctr"))
        if got != a.ops:
            print("store_bench_torch: counter is %d, expected %d"
                  % (got, a.ops), file=sys.stderr)
            return 1
    n = len(lat)
    print(json.dumps({
        "impl": "torch", "op": a.op, "clients": a.clients, "ops": n,
        "value_size": a.value_size, "procs": procs,
        "seconds": round(secs, 4), "ops_per_s": round(n / secs),
        "p50_us": round(lat[(n - 1) * 50 // 100] / 1e3, 1),
        "p99_us": round(lat[(n - 1) * 99 // 100] / 1e3, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
