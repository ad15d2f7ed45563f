"""The machinery of bench/compare: installing and building the peers,
running each library, combining and printing the figures, the --load
background conditions and the run's record in bench/results/. bench/compare
is its command line."""

import json
import os
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast",
         "all_to_all", "barrier"]
LIBS = ["gang", "openmpi", "mpich", "gloo"]
# bench/copy_floor's two floors (--floor): loads from memory every rank
# maps, and process_vm_readv from the peers' buffers.
FLOORS = ["floor", "floor_cma"]
# all_reduce's sum floors (COPY_FLOOR_ALL_REDUCE=sum): what a real
# all_reduce must move, pipelined, from mapped buffers and through
# process_vm_readv; the copy floors stay the two-core copy bound.
SUM_FLOORS = ["floor_sum", "floor_sum_cma"]
LABEL = {"gang": "gang", "openmpi": "Open MPI", "mpich": "MPICH",
         "gloo": "Gloo", "floor": "copy floor", "floor_cma": "CMA floor",
         "floor_sum": "sum floor", "floor_sum_cma": "CMA sum floor",
         "gang_mem": "gang mem"}
GLOO_ALGOS = ["ring", "ring_chunked", "halving_doubling", "bcube",
              "allreduce_ring", "allreduce_bcube"]
# Debian packages per peer, and what shows they are installed.
PACKAGES = {
    "openmpi": (["openmpi-bin", "libopenmpi-dev"],
                ["mpicc.openmpi", "mpirun.openmpi"]),
    "mpich": (["mpich", "libmpich-dev"], ["mpicc.mpich", "mpirun.mpich"]),
    "gloo": (["libgloo-dev", "g++"], ["/usr/include/gloo/config.h", "g++"]),
    "plot": (["gnuplot-nox"], ["gnuplot"]),
    "floor": (["gcc"], ["gcc"]),
    "floor_cma": (["gcc"], ["gcc"]),
    "gang_mem": (["gcc"], ["gcc"]),
    "build": (["cmake", "gcc", "libssl-dev"], ["cmake", "gcc"]),
}
# glibc malloc kept from returning memory to the kernel between calls: no
# buffer a library allocates per call is mmap'd and unmapped (page faults
# in the timed loop) and the heap top is never trimmed. 32 MiB is the
# largest mmap threshold glibc accepts on 64-bit.
GLIBC_TUNABLES = ("glibc.malloc.mmap_threshold=33554432:"
                  "glibc.malloc.trim_threshold=17179869184:"
                  "glibc.malloc.top_pad=67108864")


FAILURES = []
# CPU and wall seconds of the last run_one (launcher and ranks together).
LAST_RUN = {}


def log(msg):
    print(f"compare: {msg}", file=sys.stderr, flush=True)


def have(thing):
    return os.path.exists(thing) if thing.startswith("/") else \
        shutil.which(thing) is not None


def installed(pkg):
    """Whether dpkg has the Debian package installed (True where there is
    no dpkg: the files decide there)."""
    if not shutil.which("dpkg-query"):
        return True
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg],
                       capture_output=True, text=True)
    return r.returncode == 0 and "install ok installed" in r.stdout


def ready(group):
    """A group is there when its files are and so are its packages: the
    commands alone do not show a -dev package (openmpi-bin, which the
    tests need, brings mpicc.openmpi without mpi.h)."""
    pkgs, things = PACKAGES[group]
    return all(have(t) for t in things) and all(installed(p) for p in pkgs)


def ensure_packages(wanted, install):
    """Installs the Debian packages of `wanted` groups that are missing;
    returns the set of groups available afterwards."""
    missing = [g for g in wanted if not ready(g)]
    if missing and install:
        pkgs = sorted({p for g in missing for p in PACKAGES[g][0]})
        log(f"installing with apt: {' '.join(pkgs)}")
        sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        try:
            subprocess.run(sudo + ["apt-get", "update"], check=True, env=env,
                           stdout=subprocess.DEVNULL, timeout=600)
            subprocess.run(sudo + ["apt-get", "install", "-y",
                                   "--no-install-recommends"] + pkgs,
                           check=True, env=env, stdout=subprocess.DEVNULL,
                           timeout=1200)
        except (subprocess.SubprocessError, OSError) as e:
            log(f"apt-get failed ({e}); going on with what is installed")
    return {g for g in wanted if ready(g)}


def newer(target, sources):
    if not os.path.exists(target):
        return True
    t = os.path.getmtime(target)
    return any(os.path.getmtime(s) > t for s in sources)


def build(build_dir, libs, gang_build=None):
    """Builds gang-bench, gangrun and gang-info (--sweep's prediction;
    Release, unless an existing build is given) and the peer programs."""
    gdir = gang_build or os.path.join(build_dir, "gang")
    if gang_build is None and \
            not os.path.exists(os.path.join(gdir, "CMakeCache.txt")):
        subprocess.run(["cmake", "-S", REPO, "-B", gdir,
                        "-DCMAKE_BUILD_TYPE=Release",
                        "-DGANG_BUILD_TESTS=OFF"], check=True,
                       stdout=subprocess.DEVNULL)
    if gang_build is None:
        subprocess.run(["cmake", "--build", gdir, "-j",
                        str(os.cpu_count() or 2), "--target", "gang-bench",
                        "gangrun", "gang-info"], check=True, stdout=subprocess.DEVNULL)
    peers = os.path.join(REPO, "bench", "peers")
    # The measurement every program shares (bench/lib), compiled into each
    # peer program as gang-bench links it.
    lib = os.path.join(REPO, "bench", "lib")
    lib_c = [os.path.join(lib, f) for f in sorted(os.listdir(lib))
             if f.endswith(".c")]
    common = [os.path.join(lib, f) for f in sorted(os.listdir(lib))
              if f.endswith((".c", ".h"))]
    cflags = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra",
              "-Werror", "-I", lib]
    pdir = os.path.join(build_dir, "peers")
    os.makedirs(pdir, exist_ok=True)
    for mpi in ("openmpi", "mpich"):
        if mpi not in libs:
            continue
        src = os.path.join(peers, "mpi_bench.c")
        out = os.path.join(pdir, f"mpi_bench_{mpi}")
        if newer(out, [src] + common):
            subprocess.run([f"mpicc.{mpi}"] + cflags +
                           ["-o", out, src] + lib_c + ["-lm"], check=True)
    if any(f in libs for f in FLOORS):
        src = os.path.join(REPO, "bench", "copy_floor.c")
        out = os.path.join(pdir, "copy_floor")
        if newer(out, [src] + common):
            # -O3 as for Gloo: the floor's sums vectorised.
            subprocess.run(["gcc"] + cflags + ["-O3", "-o", out, src] +
                           lib_c + ["-lm"], check=True)
    if "gloo" in libs:
        src = os.path.join(peers, "gloo_bench.cc")
        out = os.path.join(pdir, "gloo_bench")
        if newer(out, [src] + common):
            objs = []
            for c in lib_c:
                obj = os.path.join(pdir, "bench_" +
                                   os.path.basename(c)[:-2] + ".o")
                subprocess.run(["gcc"] + cflags + ["-c", "-o", obj, c],
                               check=True)
                objs.append(obj)
            # -O3: Gloo's reductions are templates compiled here; let them
            # vectorise (Debian builds Gloo without its AVX option).
            subprocess.run(["g++", "-std=c++17", "-O3", "-Wall", "-Wextra",
                            "-Werror", "-I", lib, "-o", out, src] + objs +
                           ["-lgloo", "-lpthread", "-lm"], check=True)
    return {
        "gang-bench": os.path.join(gdir, "tools", "gang-bench", "gang-bench"),
        "gangrun": os.path.join(gdir, "tools", "gangrun", "gangrun"),
        "openmpi": os.path.join(pdir, "mpi_bench_openmpi"),
        "mpich": os.path.join(pdir, "mpi_bench_mpich"),
        "gloo": os.path.join(pdir, "gloo_bench"),
        "floor": os.path.join(pdir, "copy_floor"),
    }


def forced_algo(lib, argv):
    """GANG_ALGO for a gang run: "" for the table's choice."""
    if not lib.startswith("gang:"):
        return ""
    return f"{argv[argv.index('--op') + 1]}={lib.split(':', 1)[1]}"


def command(lib, bins, args, coll, bench_args, store_dir):
    """The command line and environment of one run of `lib`."""
    np, ncpu = args.np, os.cpu_count() or 1
    env = dict(os.environ, GLIBC_TUNABLES=GLIBC_TUNABLES)
    for k in ("GANG_SHM_DISABLE", "MPIR_CVAR_NOLOCAL", "UCX_TLS"):
        env.pop(k, None)
    argv = ["--op", coll] + bench_args
    if getattr(args, "hosts", 0):  # bench/compare_hosts.py
        return args.hosts_command(lib, bins, args, argv, store_dir), env
    gangrun = [bins["gangrun"], "--standalone", "--nproc-per-node", str(np),
               "--local-ranks-filter", "0", "--term-grace", "2s"]
    if lib in ("gang", "gang_mem") or lib.startswith("gang:"):
        if args.mode == "tcp":
            env["GANG_SHM_DISABLE"] = "1"
        env["GANG_ALGO"] = forced_algo(lib, argv)
        if lib == "gang_mem":  # buffers from gang_mem_alloc
            env["GANG_BENCH_MEM"] = "1"
        return gangrun + [bins["gang-bench"]] + argv, env
    if lib == "openmpi":
        cmd = ["mpirun.openmpi", "-np", str(np), "--bind-to", "none",
               "--mca", "pml", "ob1"]
        if args.mode == "shm":
            cmd += ["--mca", "btl", "self,vader"]
        else:
            cmd += ["--mca", "btl", "self,tcp",
                    "--mca", "btl_tcp_if_include", "lo"]
        if np > ncpu:
            # Oversubscribed: ranks must give up the CPU while they wait,
            # or a spinning rank starves the one it waits for.
            cmd += ["--oversubscribe", "--mca", "mpi_yield_when_idle", "1"]
        if os.geteuid() == 0:
            cmd += ["--allow-run-as-root"]
        return cmd + [bins["openmpi"]] + argv, env
    if lib == "mpich":
        if args.mode == "tcp":
            # ch4:ucx: NOLOCAL sends local peers through the netmod
            # instead of ch4's shm; UCX_TLS=tcp then keeps UCX off its own
            # shared memory (posix, sysv, cma) as well.
            env["MPIR_CVAR_NOLOCAL"] = "1"
            env["UCX_TLS"] = "tcp"
        return ["mpirun.mpich", "-np", str(np), bins["mpich"]] + argv, env
    if lib in FLOORS + SUM_FLOORS:
        if lib.endswith("_cma"):
            env["COPY_FLOOR_CMA"] = "1"
        if lib in SUM_FLOORS:
            env["COPY_FLOOR_ALL_REDUCE"] = "sum"
        return ([bins["gangrun"], "--standalone", "--no-store",
                 "--nproc-per-node", str(np), "--local-ranks-filter", "0",
                 "--term-grace", "2s", bins["floor"]] + argv, env)
    if lib == "gloo":
        env["GLOO_STORE_DIR"] = store_dir
        extra = []
        if coll == "all_reduce":
            extra = ["-A", ",".join(args.gloo_algos)]
        # gangrun only starts the ranks (RANK, WORLD_SIZE) and stops them
        # together; Gloo meets through its file store.
        return ([bins["gangrun"], "--standalone", "--no-store",
                 "--nproc-per-node", str(np), "--local-ranks-filter", "0",
                 "--term-grace", "2s", bins["gloo"]] + argv + extra, env)
    raise ValueError(lib)


def run_one(lib, bins, args, coll, bench_args):
    """Runs one library on one collective; returns its JSON rows."""
    store_dir = tempfile.mkdtemp(prefix="gang-compare-gloo-")
    cmd, env = command(lib, bins, args, coll, bench_args, store_dir)
    t0 = time.monotonic()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        # The launcher and every rank share the new session's group.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, err = proc.communicate(timeout=5)
                break
            except subprocess.TimeoutExpired:
                continue
        log(f"{lib} {coll}: timed out after {args.timeout}s")
        FAILURES.append(f"{lib} {coll} timed out")
        out, err = "", ""
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
        # A launcher gone early must not leave ranks behind.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_RUN["cpu_s"] = (ru1.ru_utime - ru0.ru_utime) + \
        (ru1.ru_stime - ru0.ru_stime)
    LAST_RUN["wall_s"] = time.monotonic() - t0
    LAST_RUN["err"] = err
    rows = []
    for line in out.splitlines():
        if line.startswith("[rank"):
            line = line.split("]:", 1)[-1]
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if "collective" in obj:
                rows.append(obj)
            elif "summary" in obj and obj["summary"].get("wrong"):
                log(f"{lib} {coll}: {obj['summary']['wrong']} wrong values")
    if proc.returncode != 0 or not rows:
        FAILURES.append(f"{lib} {coll}")
        tail = "\n".join(err.strip().splitlines()[-5:])
        log(f"{lib} {coll}: exit {proc.returncode}, {len(rows)} rows"
            f"{': ' + tail if tail else ''}")
    if args.verbose:
        log(f"{lib} {coll}: {len(rows)} rows in {time.monotonic() - t0:.1f}s")
    return rows


def placement(args, coll):
    """Which placement is compared: each library's in-place call, except
    all_to_all, which gang (like most) implements out of place."""
    if args.placement == "in":
        return "in_place"
    if args.placement == "out":
        return "out_of_place"
    return "out_of_place" if coll in ("all_to_all", "barrier") else "in_place"


def bus_factor(coll, n):
    return {"all_reduce": 2.0 * (n - 1) / n, "broadcast": 1.0,
            "barrier": 0.0}.get(coll, (n - 1) / n)


def combine(samples, coll, n):
    """samples[lib][size] = list of (time_us, algo, spread_us, after_us,
    loop_us[, from_root_us]) over repetitions -> figures per lib and size:
    median time, its busbw, reps, best algo, the median loop time per call,
    and with --arrival the medians of the arrival split (and of a
    broadcast's time from the root's entry to the last exit)."""
    res = {}
    for lib, by_size in samples.items():
        res[lib] = {}
        for size, vals in sorted(by_size.items()):
            times = [v[0] for v in vals]
            med = statistics.median(times)
            algos = [v[1] for v in vals if v[1]]
            row = {"time_us": med, "reps": len(times),
                   "rep_times_us": times,
                   "busbw_gbs": (size / (med * 1e3) * bus_factor(coll, n)
                                 if med > 0 and coll != "barrier" else None)}
            if algos:
                row["algo"] = max(set(algos), key=algos.count)
            loops = [v[4] for v in vals if len(v) > 4 and v[4]]
            if loops:
                row["loop_us"] = statistics.median(loops)
            split = [v for v in vals if v[2] is not None and v[3] is not None]
            if split:
                row["spread_us"] = statistics.median(v[2] for v in split)
                row["after_last_us"] = statistics.median(v[3] for v in split)
            roots = [v[5] for v in vals if len(v) > 5 and v[5] is not None]
            if roots:
                row["from_root_us"] = statistics.median(roots)
            res[lib][size] = row
    return res


def fmt_size(b):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div}{unit}"
    return str(b)


def markdown(coll, comb, libs, args):
    sizes = sorted({s for lib in libs for s in comb.get(lib, {})})
    head = ["size"]
    for lib in libs:
        head += [f"{LABEL[lib]} µs"] + ([] if coll == "barrier" else
                                         [f"{LABEL[lib]} GB/s"])
    peers = [p for p in libs if p != "gang"]
    for p in peers:
        head += [f"t gang/{LABEL[p]}"] + ([] if coll == "barrier" else
                                          [f"bw gang/{LABEL[p]}"])
    if "gloo" in libs and coll == "all_reduce":
        head.append("Gloo algo")
    lines = [f"### {coll} — {args.np} ranks, {args.mode} mode, "
             f"{placement(args, coll).replace('_', '-')}, "
             f"median of {args.reps} reps × {args.iters} iters", "",
             "| " + " | ".join(head) + " |",
             "|" + "---:|" * len(head)]
    for s in sizes:
        cells = [fmt_size(s)]
        g = comb.get("gang", {}).get(s)
        for lib in libs:
            r = comb.get(lib, {}).get(s)
            cells.append(f"{r['time_us']:.1f}" if r else "—")
            if coll != "barrier":
                cells.append(f"{r['busbw_gbs']:.3f}" if r else "—")
        for p in peers:
            r = comb.get(p, {}).get(s)
            ok = r and g and r["time_us"] > 0 and g["time_us"] > 0
            cells.append(f"{g['time_us'] / r['time_us']:.2f}" if ok else "—")
            if coll != "barrier":
                ok = ok and r["busbw_gbs"] and g["busbw_gbs"]
                cells.append(f"{g['busbw_gbs'] / r['busbw_gbs']:.2f}"
                             if ok else "—")
        if "gloo" in libs and coll == "all_reduce":
            r = comb.get("gloo", {}).get(s)
            cells.append(r.get("algo", "—") if r else "—")
        lines.append("| " + " | ".join(cells) + " |")
    if getattr(args, "loop", False):
        lines += loop_table(sizes, comb, libs, peers)
    if args.arrival:
        lines += arrival_table(sizes, comb, libs, peers)
    lines.append("")
    lines.append("t = time ratio (below 1: gang faster); bw = busbw ratio "
                 "(above 1: gang faster)." +
                 (" Gloo has no shared-memory transport: it is TCP in both "
                  "modes." if args.mode == "shm" and "gloo" in libs else ""))
    return "\n".join(lines)


def loop_table(sizes, comb, libs, peers):
    """--loop: each library's wall time per call over its timed loop (the
    slowest rank's), and gang/peer of it."""
    head = ["size"] + [f"{LABEL[lib]} µs/call" for lib in libs] + \
        [f"loop gang/{LABEL[p]}" for p in peers]
    lines = ["", "Time per call over the timed loop (docs/benchmarking.md):",
             "", "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for s in sizes:
        g = comb.get("gang", {}).get(s, {}).get("loop_us")
        cells = [fmt_size(s)]
        for lib in libs:
            v = comb.get(lib, {}).get(s, {}).get("loop_us")
            cells.append(f"{v:.1f}" if v else "—")
        for p in peers:
            v = comb.get(p, {}).get(s, {}).get("loop_us")
            cells.append(f"{g / v:.2f}" if g and v else "—")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def arrival_table(sizes, comb, libs, peers):
    """--arrival: each library's time split into the spread of the ranks'
    entries and the time after the last arrival (medians over
    repetitions of the programs' medians), and gang/peer of the latter;
    for a broadcast also the time from the root's entry to the last exit
    and gang/peer of it (with --sync, one call's time)."""
    rooted = any("from_root_us" in comb.get(lib, {}).get(s, {})
                 for lib in libs for s in sizes)
    head = ["size"] + [f"{LABEL[lib]} spread + after last µs"
                       for lib in libs] + \
        [f"after last gang/{LABEL[p]}" for p in peers]
    if rooted:
        head += [f"{LABEL[lib]} root to last µs" for lib in libs] + \
            [f"root to last gang/{LABEL[p]}" for p in peers]
    lines = ["", "Arrival split (docs/benchmarking.md):", "",
             "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for s in sizes:
        cells = [fmt_size(s)]
        for lib in libs:
            r = comb.get(lib, {}).get(s)
            ok = r and "after_last_us" in r
            cells.append(f"{r['spread_us']:.3f} + {r['after_last_us']:.3f}"
                         if ok else "—")
        g = comb.get("gang", {}).get(s)
        for p in peers:
            r = comb.get(p, {}).get(s)
            ok = r and g and r.get("after_last_us") and \
                g.get("after_last_us") is not None
            cells.append(f"{g['after_last_us'] / r['after_last_us']:.2f}"
                         if ok else "—")
        if rooted:
            roots = {lib: comb.get(lib, {}).get(s, {}).get("from_root_us")
                     for lib in libs}
            cells += [f"{roots[lib]:.3f}" if roots[lib] else "—"
                      for lib in libs]
            cells += [f"{roots['gang'] / roots[p]:.2f}"
                      if roots.get("gang") and roots.get(p) else "—"
                      for p in peers]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def plot(coll, comb, libs, args, out_dir):
    """Time and busbw against size, log-log, one line per library (the
    drawing bench/plot makes of a stored run)."""
    png = os.path.join(out_dir, f"compare-{args.mode}-{coll}.png")
    lines = [(LABEL[lib] + (" (best algorithm)" if lib == "gloo" and
                            coll == "all_reduce" else ""), comb.get(lib, {}))
             for lib in libs]
    title = (f"{coll}: {args.np} ranks, {args.mode} mode "
             f"(median of {args.reps} interleaved reps)")
    return png if draw(coll, lines, png, title) else None


def draw(coll, lines, png, title):
    """Draws [(title, {size: {"time_us", "busbw_gbs"}})] into png: time
    and busbw against size, log scales, one line each; False when there is
    nothing to draw (barrier, no figures) or no gnuplot."""
    lines = [(t, f) for t, f in lines
             if any(s > 0 and v.get("time_us") for s, v in f.items())]
    if coll == "barrier" or not lines or not shutil.which("gnuplot"):
        return False
    with tempfile.TemporaryDirectory(prefix="gang-plot-") as tmp:
        series = {"time_us": [], "busbw_gbs": []}
        for i, (t, f) in enumerate(lines):
            dat = os.path.join(tmp, f"{i}.dat")
            with open(dat, "w") as out:
                for s in sorted(f):
                    v = f[s]
                    if s > 0:
                        out.write(f"{s} {v.get('time_us') or 'NaN'} "
                                  f"{v.get('busbw_gbs') or 'NaN'}\n")
            t = t.replace("'", "")
            series["time_us"].append(f"'{dat}' using 1:2 with linespoints "
                                     f"lw 2 title '{t}'")
            series["busbw_gbs"].append(f"'{dat}' using 1:3 with linespoints "
                                       f"lw 2 title '{t}'")
        script = "\n".join([
            "set terminal pngcairo size 1400,560 noenhanced",
            f"set output '{png}'",
            f"set multiplot layout 1,2 title '{title}'",
            "set logscale x 2", "set logscale y 10", "set grid",
            "set format x '%.0b%B'", "set format y '%g'",
            "set xlabel 'size (bytes)'", "set key top left",
            "set ylabel 'time (us)'",
            "plot " + ", ".join(series["time_us"]),
            "set ylabel 'busbw (GB/s)'",
            "plot " + ", ".join(series["busbw_gbs"]),
            "unset multiplot", ""])
        done = subprocess.run(["gnuplot"], input=script, text=True,
                              timeout=60)
    return done.returncode == 0



# ---- On a busy machine (--load) -------------------------------------------

LOAD_SCRIPTS = {
    # A process started every millisecond by each loop: short bursts that
    # keep most of a 2-core machine busy, as data loaders, loggers and
    # monitors do.
    "sleepers": "while :; do sleep 0.001; done",
    # A CPU taken whole by each loop.
    "busy": "while :; do :; done",
}


def parse_load(text):
    """'none,sleepers:4,busy:1' -> [('none', 0), ('sleepers', 4), ...]"""
    out = []
    for item in text.split(","):
        item = item.strip()
        if item == "none":
            out.append(("none", 0))
            continue
        kind, _, n = item.partition(":")
        if kind not in LOAD_SCRIPTS or not n.isdigit() or int(n) < 1:
            raise ValueError(f"'{item}' is not none, sleepers:N or busy:N")
        out.append((kind, int(n)))
    return out


def load_name(cond):
    return "idle" if cond[0] == "none" else f"{cond[1]} {cond[0]}"


class Background:
    """The processes of one load condition, each in its own session, all
    killed (with whatever they started) on exit."""

    def __init__(self, cond):
        self.cond, self.procs = cond, []

    def __enter__(self):
        kind, n = self.cond
        for _ in range(n):
            self.procs.append(subprocess.Popen(
                ["/bin/sh", "-c", LOAD_SCRIPTS[kind]],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True))
        if n:
            time.sleep(0.5)  # let them reach their steady state
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        return False


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    if t and t[-1] in mult:
        return int(t[:-1]) * mult[t[-1]]
    return int(t)


def load_iters(size, iters):
    """Timed iterations for one size: -n up to 1 MiB, fewer above (the time
    per run stays about that of 1 MiB), at least 10."""
    if size <= (1 << 20):
        return iters
    return max(10, iters * (1 << 20) // size)


def run_load(args, bins, libs, colls):
    """Every load condition in turn; returns the records of every run."""
    conds = parse_load(args.load)
    sizes = [parse_size(x) for x in args.sizes.split(",") if x]
    records = []
    t0 = time.monotonic()
    for cond in conds:
        with Background(cond):
            for rep in range(args.reps):
                for coll in colls:
                    pl = placement(args, coll)
                    only = "--inplace-only" if pl == "in_place" else \
                        "--outofplace-only"
                    csizes = [8] if coll == "barrier" else sizes
                    for size in csizes:
                        n = load_iters(size, args.iters)
                        bench_args = ["-b", str(size), "-e", str(size),
                                      "-n", str(n), "-w", str(args.warmup),
                                      "-c", args.check, "-d", args.datatype,
                                      "--json"]
                        if args.late_us:
                            bench_args += ["--late-us", str(args.late_us)]
                        if coll != "barrier":
                            bench_args.append(only)
                        for lib in libs:
                            rows = run_one(lib, bins, args, coll, bench_args)
                            best = None
                            for row in rows:
                                r = row.get(pl)
                                if r is None or r.get("time_us") is None:
                                    continue
                                if r.get("wrong"):
                                    FAILURES.append(
                                        f"{lib} {coll} {size} B wrong")
                                    continue
                                if best is None or \
                                        r["time_us"] < best["time_us"]:
                                    best = r
                            if best is None:
                                continue
                            records.append({
                                "load": load_name(cond), "rep": rep,
                                "collective": coll, "lib": lib,
                                "size": size, "iters": n,
                                "p50_us": best["time_us"],
                                "p99_us": best.get("p99_us"),
                                "min_us": best.get("min_us"),
                                "max_us": best.get("max_us"),
                                "cpu_frac": best.get("cpu_frac"),
                                "run_cpu_s": LAST_RUN.get("cpu_s"),
                                "run_wall_s": LAST_RUN.get("wall_s")})
                log(f"{load_name(cond)}: repetition {rep + 1}/{args.reps} "
                    f"done ({time.monotonic() - t0:.0f}s)")
    return records


def fmt_us(v):
    if v is None:
        return "—"
    return f"{v:.0f}" if v >= 1000 else f"{v:.1f}" if v >= 10 else \
        f"{v:.2f}"


def load_summary(records, libs):
    """(coll, load, size, lib) -> p50, p99 (medians over runs), worst run
    median, slow runs (min above 10x the same library's idle p50), runs,
    CPU fraction (median over runs of the busiest rank's)."""
    groups = {}
    for r in records:
        groups.setdefault((r["collective"], r["load"], r["size"], r["lib"]),
                          []).append(r)
    out = {}
    for key, rs in groups.items():
        coll, _, size, lib = key
        idle = groups.get((coll, "idle", size, lib))
        idle_p50 = statistics.median(x["p50_us"] for x in idle) \
            if idle else None
        p99s = [x["p99_us"] for x in rs if x["p99_us"] is not None]
        cpus = [x["cpu_frac"] for x in rs if x["cpu_frac"] is not None]
        out[key] = {
            "p50_us": statistics.median(x["p50_us"] for x in rs),
            "p99_us": statistics.median(p99s) if p99s else None,
            "worst_p50_us": max(x["p50_us"] for x in rs),
            "slow_runs": (sum(1 for x in rs if x["min_us"] is not None and
                              x["min_us"] > 10 * idle_p50)
                          if idle_p50 else None),
            "runs": len(rs),
            "cpu_frac": statistics.median(cpus) if cpus else None}
    return out


def load_markdown(summary, libs, args):
    peers = [p for p in libs if p != "gang"]
    lines = []
    colls = sorted({k[0] for k in summary}, key=COLLS.index)
    loads = []
    for k in summary:
        if k[1] not in loads:
            loads.append(k[1])
    for coll in colls:
        head = ["load", "size"]
        for lib in libs:
            head += [f"{LABEL[lib]} p50", f"{LABEL[lib]} p99"]
        for p in peers:
            head += [f"p50 gang/{LABEL[p]}", f"p99 gang/{LABEL[p]}"]
        head += [f"slow runs {'/'.join(LABEL[x] for x in libs)}",
                 f"CPU {'/'.join(LABEL[x] for x in libs)}"]
        lines += [f"### {coll} on a busy machine — {args.np} ranks, "
                  f"{args.mode} mode, µs; {args.reps} runs per cell", "",
                  "| " + " | ".join(head) + " |",
                  "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
        for load in loads:
            sizes = sorted({k[2] for k in summary
                            if k[0] == coll and k[1] == load})
            for size in sizes:
                cells = [load, fmt_size(size)]
                g = summary.get((coll, load, size, "gang"))
                for lib in libs:
                    r = summary.get((coll, load, size, lib))
                    cells += [fmt_us(r["p50_us"]) if r else "—",
                              fmt_us(r["p99_us"]) if r else "—"]
                for p in peers:
                    r = summary.get((coll, load, size, p))
                    for f in ("p50_us", "p99_us"):
                        ok = r and g and r[f] and g[f]
                        cells.append(f"{g[f] / r[f]:.2f}" if ok else "—")
                slow, cpu = [], []
                for lib in libs:
                    r = summary.get((coll, load, size, lib))
                    slow.append("—" if not r or r["slow_runs"] is None
                                else f"{r['slow_runs']}/{r['runs']}")
                    cpu.append("—" if not r or r["cpu_frac"] is None
                               else f"{r['cpu_frac']:.2f}")
                cells += [" ".join(slow), " ".join(cpu)]
                lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "p50, p99: medians over the runs of each run's "
                  "median and 99th percentile of the per-iteration time "
                  "(slowest rank). slow runs: runs whose fastest iteration "
                  "is above 10x the library's idle p50 (a slow steady "
                  "state). CPU: the busiest rank's CPU time over the timed "
                  "loop's wall time" +
                  (f", rank 0 arriving {args.late_us} µs late"
                   if args.late_us else "") + ".", ""]
    return "\n".join(lines)


# ---- The run's record (bench/results) -------------------------------------

def git(*argv):
    """Output of a git command on this checkout, or "" without git."""
    try:
        return subprocess.run(["git", "-C", REPO] + list(argv),
                              capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def write_record(args, report, started, load_start):
    """Writes the run's JSON into --results-dir with what is needed to
    tell runs apart later: when, which commit (and whether the tree had
    uncommitted changes), the host and its load, the command line."""
    if args.results_dir is None:
        return
    commit = git("rev-parse", "--short=7", "HEAD") or None
    record = dict(report)
    record.update({
        "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit,
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "command": " ".join(["bench/compare"] +
                            [shlex.quote(a) for a in sys.argv[1:]]),
        "host": {"cpu": cpu_model(), "nproc": os.cpu_count(),
                 "loadavg_start": load_start,
                 "loadavg_end": [round(x, 2) for x in os.getloadavg()]}})
    if FAILURES:
        record["failures"] = list(FAILURES)
    mode = args.mode + ("-load" if args.load is not None else "")
    if getattr(args, "hosts", 0):
        mode = f"hosts{args.hosts}x{args.per_host}-{mode}"
    name = f"{started:%Y-%m-%dT%H%M%SZ}-{mode}-{commit or 'nogit'}.json"
    os.makedirs(args.results_dir, exist_ok=True)
    path = os.path.join(args.results_dir, name)
    with open(path, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    log(f"wrote {os.path.relpath(path, REPO)}")
