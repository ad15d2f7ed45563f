"""bench/compare across the hosts of a cluster in a box (--hosts): bringing
it up and down, each library's launch across it, and the forced sweep of
gang's algorithms (--sweep) with its table."""

import atexit
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile

from compare_lib import REPO, fmt_size, fmt_us, forced_algo

CLUSTER = os.path.join(REPO, "scripts", "cluster")
HOSTS_NAME, HOSTS_NET = "cmp", "10.78.0"
HOSTS = {}  # the cluster's files: agent, hostfile, secret; and a port


def hosts_up(args):
    """Brings up args.hosts hosts (scripts/cluster, with --delay and
    --rate), the files mpirun and gangrun need to cross them, and their
    teardown at exit (also on a signal)."""
    if os.geteuid() != 0:
        sys.exit("compare: --hosts needs root (network namespaces)")
    env = dict(os.environ, GANG_CLUSTER=HOSTS_NAME)
    subprocess.run([CLUSTER, "down"], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    up = [CLUSTER, "up", str(args.hosts), "--net", HOSTS_NET]
    if args.delay:
        up += ["--delay", args.delay]
    if args.rate:
        up += ["--rate", args.rate]
    subprocess.run(up, env=env, check=True, stdout=subprocess.DEVNULL)

    def down(*_):
        subprocess.run([CLUSTER, "down"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(down)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: sys.exit(130))
    d = tempfile.mkdtemp(prefix="gang-compare-hosts-")
    atexit.register(shutil.rmtree, d, True)
    agent = os.path.join(d, "agent")
    with open(agent, "w") as f:
        # mpirun's rsh agent: "agent [options] hN command..." on host N.
        f.write("#!/bin/sh\nwhile [ $# -gt 0 ]; do case $1 in -*) shift ;; "
                "*) break ;; esac; done\nh=$1\nshift\n"
                f"GANG_CLUSTER={HOSTS_NAME} exec {CLUSTER} exec \"${{h#h}}\" "
                "sh -c \"$*\"\n")
    os.chmod(agent, 0o755)
    hostfile = os.path.join(d, "hosts")
    with open(hostfile, "w") as f:
        for i in range(args.hosts):
            f.write(f"h{i} slots={args.per_host}\n")
    secret = os.path.join(d, "secret")
    with open(secret, "w") as f:
        f.write("compare-across-hosts\n")
    HOSTS.update(agent=agent, hostfile=hostfile, secret=secret, dir=d,
                 runs=0, port=20000 + os.getpid() % 20000, env=env)


# --sweep: the algorithms gang can be forced to run per collective, for
# the table of which one was fastest against what the table chose.
SWEEP = {"all_reduce": ["recursive_doubling", "halving_doubling", "ring"],
         "broadcast": ["binomial", "scatter_allgather"],
         "all_gather": ["bruck", "ring"],
         "reduce_scatter": ["recursive_halving", "ring"],
         "all_to_all": ["pairwise"], "barrier": ["dissemination"]}


# A broadcast's root does not wait for the others, so back-to-back calls
# overlap and neither the median nor the loop's time per call is one
# call's. With --sweep across hosts gang also runs each broadcast with a
# barrier before every call and, on the box's one clock, times the root's
# entry to the last rank's exit ("gang_one"): what the model prices.
ONE_CALL = ["--sync", "--arrival"]


def one_call_libs(args, coll):
    """The extra runs --sweep makes of coll across hosts: gang_one for a
    broadcast."""
    return ["gang_one"] if getattr(args, "hosts", 0) and \
        coll == "broadcast" else []


def sweep_libs(args, coll):
    """gang with each algorithm of coll forced ("gang:ring"), and the
    two-level forms where hosts hold several ranks."""
    algos = list(SWEEP.get(coll, []))
    if getattr(args, "hosts", 0) and args.per_host > 1 and coll in (
            "all_reduce", "broadcast", "barrier", "all_gather",
            "reduce_scatter"):
        algos.append("hierarchical")
        if coll == "all_reduce":
            algos.append("hierarchical_rails")
    return [f"gang:{a}" for a in algos]


MODEL_LINE = re.compile(r"link model: alpha ([0-9.]+) us, bandwidth "
                        r"([0-9.e+-]+) GB/s")


ONE_FLOW = re.compile(r"one flow ([0-9.e+-]+) GB/s")


def note_model(args, coll, log):
    """The link model the table's run of coll used (rank 0's INFO line),
    kept in args.models[coll] as (alpha us, GB/s, one flow's GB/s)."""
    m = MODEL_LINE.search(log or "")
    if m:
        one = ONE_FLOW.search(log or "")
        args.models = getattr(args, "models", {})
        args.models[coll] = (float(m.group(1)), float(m.group(2)),
                             float(one.group(1)) if one
                             else float(m.group(2)))


def predict(args, coll, algo, size):
    """The model's time (us) of the table's algorithm for a row of `size`
    bytes, from gang-info --cost with the hosts' shape (the two-level
    forms, and flat TCP's shared host links); None where the model does
    not price it (shared memory)."""
    model = getattr(args, "models", {}).get(coll)
    if model is None or not algo:
        return None
    n = args.hosts * args.per_host
    block = size // n if coll in ("all_gather", "reduce_scatter") else size
    gi = os.path.join(os.path.dirname(os.path.dirname(args.gang_bin)),
                      "gang-info", "gang-info")
    out = subprocess.run([gi, "--cost", coll, algo, str(block), str(n),
                          str(model[0]), str(model[1]), str(args.per_host),
                          str(model[2])],
                         capture_output=True,
                         text=True).stdout.strip()
    try:
        return float(out)
    except ValueError:
        return None


def sweep_markdown(coll, comb, args):
    """The forced sweep of one collective: per size, the time of the
    table's choice (and its name, as gang-bench reports what ran) and of
    each algorithm forced, the fastest, and whether the table's choice
    agrees: it is the fastest forced algorithm, or within 10 % of it (runs
    of one algorithm scatter about that much between repetitions here, and
    more on a machine with more ranks than CPUs). Beside it, the link
    model's price of the table's choice against the time per call over
    the timed loop (the median of the slowest rank's calls also holds the
    ranks' entry skew, which across a delay lasts from call to call and
    can double a one-step collective's time), or for a broadcast against
    one call's time (ONE_CALL), as its calls overlap in a loop."""
    forced = sweep_libs(args, coll)
    sizes = sorted({s for lib in ["gang"] + forced for s in comb.get(lib, {})})
    one = "gang_one" in comb
    head = ["size", "table's choice", "µs",
            "µs, one call (root to last)" if one else "µs/call (loop)",
            "model µs", "measured/model"] + \
        [f"{lib.split(':', 1)[1]} µs" for lib in forced] + \
        ["fastest forced", "agrees"]
    rows, agree, cells, priced, near = [], 0, 0, 0, 0
    for s in sizes:
        auto = comb.get("gang", {}).get(s, {}).get("time_us")
        ts = {lib: comb.get(lib, {}).get(s, {}).get("time_us")
              for lib in forced}
        known = {lib: t for lib, t in ts.items() if t is not None}
        best = min(known, key=known.get) if known else None
        name = comb.get("gang", {}).get(s, {}).get("algo")
        ok = auto is not None and best is not None and (
            auto <= 1.1 * known[best] or name == best.split(":", 1)[1])
        # A call that moves nothing (all_gather's and reduce_scatter's
        # blocks below one element) returns at once for every algorithm:
        # no choice to make, and nothing to price.
        empty = s == 0 and coll != "barrier"
        if auto is not None and best is not None and not empty:
            cells += 1
            agree += ok
        model = predict(args, coll, name, s)
        measured = comb.get("gang_one", {}).get(s, {}).get("from_root_us") \
            if one else comb.get("gang", {}).get(s, {}).get("loop_us")
        ratio = "-"
        if model is not None:
            comb.setdefault("gang", {}).setdefault(s, {})["model_us"] = model
            if measured and model > 0:
                priced += 1
                near += 0.8 <= measured / model <= 1.25
                ratio = f"{measured / model:.2f}"
        rows.append([fmt_size(s), name or "?", fmt_us(auto), fmt_us(measured),
                     fmt_us(model), ratio] +
                    [fmt_us(ts[lib]) for lib in forced] +
                    [best.split(":", 1)[1] if best else "-",
                     "yes" if ok else "no"])
    out = [f"### {coll}: forced sweep ({agree} of {cells} sizes: the "
           "table's choice is the fastest or within 10 % of it; the model "
           "within 0.8-1.25x of "
           f"{'one call' if one else 'the time per call'} in {near} of "
           f"{priced})",
           "",
           "| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    args.model_near = getattr(args, "model_near", {})
    args.model_near[coll] = [near, priced]
    return "\n".join(out), agree, cells


def on_host(i, argv, env_vars):
    """argv run on host i of the box, with env_vars set there."""
    return ["env", f"GANG_CLUSTER={HOSTS_NAME}", CLUSTER, "exec", str(i),
            "env"] + \
        [f"{k}={v}" for k, v in env_vars.items()] + argv


def hosts_command(lib, bins, args, argv, store_dir):
    """One run of `lib` across the hosts: a shell line that starts every
    host's part and keeps host 0's output (rank 0 prints). Called through
    args.hosts_command by compare_lib.command."""
    n, k = args.hosts, args.per_host
    np = n * k
    args.gang_bin = bins["gang-bench"]  # gang-info beside it: predict()
    over = k > (os.cpu_count() or 1) or np > (os.cpu_count() or 1)
    parts = []
    if lib in ("gang", "gang_one") or lib.startswith("gang:"):
        HOSTS["port"] += 2
        for i in range(n):
            cmd = on_host(i, [bins["gangrun"], "--nnodes", str(n),
                              "--node-rank", str(i), "--nproc-per-node",
                              str(k), "--master-addr", "h0",
                              "--master-port", str(HOSTS["port"]),
                              "--secret-file", HOSTS["secret"],
                              "--local-ranks-filter", "0",
                              "--term-grace", "2s", bins["gang-bench"]] +
                          argv, dict(GANG_ALGO=forced_algo(lib, argv),
                                     GANG_SHM_DISABLE="1"
                                     if args.mode == "tcp" else "0",
                                     # rank 0 logs the world's link model
                                     GANG_DEBUG="INFO",
                                     GANG_DEBUG_SUBSYS="INIT"))
            parts.append((i, cmd))
    elif lib == "openmpi":
        net = HOSTS_NET + ".0/24"
        cmd = ["mpirun.openmpi", "-np", str(np), "--hostfile",
               HOSTS["hostfile"], "--mca", "plm_rsh_agent", HOSTS["agent"],
               "--mca", "oob_tcp_if_include", net, "--mca", "pml", "ob1",
               "--mca", "btl", "self,tcp" if args.mode == "tcp"
               else "self,vader,tcp",
               "--mca", "btl_tcp_if_include", net, "--bind-to", "none",
               "--allow-run-as-root"]
        if over:
            cmd += ["--oversubscribe", "--mca", "mpi_yield_when_idle", "1"]
        return cmd + [bins["openmpi"]] + argv
    elif lib == "gloo":
        extra = ["-A", ",".join(args.gloo_algos)] \
            if "all_reduce" in argv else []
        for i in range(n):
            addr = subprocess.run([CLUSTER, "addr", str(i)], env=HOSTS["env"],
                                  capture_output=True, text=True,
                                  check=True).stdout.strip()
            for lr in range(k):
                r = i * k + lr
                parts.append((r, on_host(i, [bins["gloo"]] + argv + extra,
                                         dict(RANK=r, WORLD_SIZE=np,
                                              GLOO_HOST=addr,
                                              GLOO_STORE_DIR=store_dir))))
    else:
        raise ValueError(f"{lib} does not run across hosts here")
    HOSTS["runs"] += 1
    line = ""
    for who, cmd in parts:
        q = " ".join(shlex.quote(str(c)) for c in cmd)
        line += f"{q} >\"$0\" & " if who == 0 else f"{q} >/dev/null & "
    return ["sh", "-c", line + "wait; cat \"$0\"",
            os.path.join(HOSTS["dir"], f"rank0.{HOSTS['runs']}.out")]


