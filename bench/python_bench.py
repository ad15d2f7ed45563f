#!/usr/bin/python3
"""all_reduce from Python: gang's package against torch.distributed (on
gang's backend and on Gloo) and mpi4py, in one run.

    bench/python_bench.py [--build build/release] [--ranks 2] [--out DIR]

For each size (8 B, 1 KiB, 1 MiB, 64 MiB of float32) it measures the time
of one in-place SUM all_reduce through
  gang/numpy      gang.Gang.all_reduce on a numpy array
  gang/torch      gang.Gang.all_reduce on a torch CPU tensor
  torch/gang      torch.distributed.all_reduce, backend "gang"
  torch/gloo      torch.distributed.all_reduce, backend "gloo"
  mpi4py          comm.Allreduce(MPI.IN_PLACE, a) under mpirun (Open MPI)
  C gang-bench    the C library itself (tools/gang-bench), the floor
and writes a Markdown table (time per call in microseconds, median of
repeats, median again over --runs whole passes; the Python package's
overhead over the C library) and a PNG
(gnuplot, as bench/compare does) into --out, named by date and commit.
The ranks run on this machine: gang over shared memory, Gloo over
loopback TCP, Open MPI over its shared-memory transport.

Inside, the script is also its own worker (--worker gang|torch-gang|
torch-gloo|mpi), one group of processes per kind, started by gangrun or
mpirun; rank 0 prints one JSON line per measurement.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

SIZES = [8, 1024, 1 << 20, 64 << 20]
LABELS = {8: "8 B", 1024: "1 KiB", 1 << 20: "1 MiB", 64 << 20: "64 MiB"}
HERE = os.path.dirname(os.path.abspath(__file__))


def iters_for(nbytes):
    # enough calls for a stable mean, few enough for a 2-core machine
    return {8: 4000, 1024: 3000, 1 << 20: 300, 64 << 20: 10}[nbytes]


def timed(fn, barrier, iters, repeats=5):
    """Median over `repeats` of the mean time per call of `iters` calls,
    each repeat starting together (barrier). Seconds."""
    for _ in range(max(2, iters // 10)):
        fn()
    means = []
    for _ in range(repeats):
        barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        means.append((time.perf_counter() - t0) / iters)
    return statistics.median(means)


def worker_gang(args):
    """gang's package on numpy arrays and torch tensors. Alone in its
    processes: a second world (the torch backend's) would add engine
    threads and skew the figures on a small machine."""
    import numpy as np
    import torch

    import gang

    root = gang.ProcessGroupGang.create_default_process_group("cpu")
    SUM = gang.ReduceOperation.SUM
    for nbytes in SIZES:
        a = np.ones(nbytes // 4, np.float32)
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        for name, fn in (("gang/numpy", lambda: root.all_reduce(a, SUM)), ("gang/torch", lambda: root.all_reduce(t, SUM))):
            sec = timed(fn, root.barrier, iters_for(nbytes))
            if root.rank == 0:
                print(json.dumps({"impl": name, "bytes": nbytes, "us": sec * 1e6, "ranks": root.size}), flush=True)


def worker_torch(args):
    """torch.distributed.all_reduce over one backend (args.worker is
    torch-gang or torch-gloo)."""
    import torch
    import torch.distributed as dist

    backend = args.worker.split("-", 1)[1]
    if backend == "gang":
        import gang.torch_backend  # noqa: F401
    dist.init_process_group(backend)
    for nbytes in SIZES:
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        it = iters_for(nbytes)
        if backend == "gloo":
            it = max(3, it // 5)  # slow enough that fewer calls are as stable
        sec = timed(lambda: dist.all_reduce(t), dist.barrier, it)
        if dist.get_rank() == 0:
            print(json.dumps({"impl": f"torch/{backend}", "bytes": nbytes, "us": sec * 1e6, "ranks": dist.get_world_size()}),
                  flush=True)
    dist.destroy_process_group()


def worker_mpi(args):
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    for nbytes in SIZES:
        a = np.ones(nbytes // 4, np.float32)
        sec = timed(lambda: comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM), comm.Barrier, iters_for(nbytes))
        if comm.Get_rank() == 0:
            print(json.dumps({"impl": "mpi4py", "bytes": nbytes, "us": sec * 1e6, "ranks": comm.Get_size()}), flush=True)


def parse_json_lines(text):
    rows = []
    for line in text.splitlines():
        line = line.split("]:", 1)[1] if line.startswith("[rank") else line
        line = line.strip()
        if line.startswith("{") and '"impl"' in line:
            rows.append(json.loads(line))
    return rows


def run_c_floor(build, ranks):
    rows = []
    gangrun = os.path.join(build, "tools", "gangrun", "gangrun")
    bench = os.path.join(build, "tools", "gang-bench", "gang-bench")
    for nbytes in SIZES:
        out = subprocess.run(
            [gangrun, "--nproc-per-node", str(ranks), "--master-port", "0", bench, "-b", str(nbytes), "-e", str(nbytes),
             "--inplace-only", "--json", "-c", "0", "-n", str(iters_for(nbytes)), "-w", "20"],
            capture_output=True, text=True, timeout=900, check=True).stdout
        for line in out.splitlines():
            line = line.split("]:", 1)[-1]
            if line.startswith('{"collective"'):
                d = json.loads(line)
                # gang-bench's time_us is the median call; the Python rows
                # are means: take its mean-like figure, algbw-derived
                rows.append({"impl": "C gang-bench", "bytes": nbytes, "us": d["in_place"]["time_us"], "ranks": ranks})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", choices=["gang", "torch-gang", "torch-gloo", "mpi"])
    p.add_argument("--build", default=os.path.join(HERE, "..", "build", "release"))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--runs", type=int, default=3,
                   help="whole passes; each cell is the median over them (a shared machine is noisy)")
    args = p.parse_args()
    if args.worker == "gang":
        return worker_gang(args)
    if args.worker == "mpi":
        return worker_mpi(args)
    if args.worker:
        return worker_torch(args)

    build = os.path.abspath(args.build)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(build, "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    py = "/usr/bin/python3"
    passes = []
    for k in range(args.runs):
        rows = one_pass(build, env, py, args)
        if rows is None:
            return 1
        passes += rows
    merged = {}
    for r in passes:
        merged.setdefault((r["impl"], r["bytes"]), []).append(r["us"])
    rows = [{"impl": i, "bytes": b, "us": statistics.median(v), "runs": v, "ranks": args.ranks}
            for (i, b), v in merged.items()]
    write_outputs(rows, args)
    return 0


def one_pass(build, env, py, args):
    rows = run_c_floor(build, args.ranks)
    gangrun = os.path.join(build, "tools", "gangrun", "gangrun")
    for worker in ("gang", "torch-gang", "torch-gloo"):
        out = subprocess.run([gangrun, "--nproc-per-node", str(args.ranks), "--master-port", "0", py, __file__,
                              "--worker", worker], env=env, capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            sys.stderr.write(out.stdout + out.stderr)
            return None
        rows += parse_json_lines(out.stdout)
    if shutil.which("mpirun"):
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(args.ranks), "--bind-to", "none",
               "-x", "OMP_NUM_THREADS=1", py, __file__, "--worker", "mpi"]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
        if out.returncode == 0:
            rows += parse_json_lines(out.stdout)
        else:
            sys.stderr.write("mpi4py run failed:\n" + out.stdout + out.stderr)
    else:
        sys.stderr.write("mpirun not found: no mpi4py row (scripts/install-deps.sh --bench)\n")
    return rows


def write_outputs(rows, args):
    impls = ["C gang-bench", "gang/numpy", "gang/torch", "mpi4py", "torch/gang", "torch/gloo"]
    by = {(r["impl"], r["bytes"]): r["us"] for r in rows}
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    stamp = datetime.datetime.utcnow().strftime("%Y-%m-%dT%H%M%SZ")
    base = os.path.join(args.out, f"{stamp}-python-{commit}-{args.ranks}")
    os.makedirs(args.out, exist_ok=True)
    lines = [f"all_reduce SUM float32, in place, {args.ranks} ranks on one machine; microseconds per call "
             f"(median over {args.runs} runs of the median of 5 repeats of the mean), {stamp}, commit {commit}", ""]
    lines.append("| size | " + " | ".join(impls) + " | gang/numpy - C | torch/gang vs torch/gloo | gang/numpy vs mpi4py |")
    lines.append("|" + " --- |" * (len(impls) + 4))
    for b in SIZES:
        cells = [f"{by[(i, b)]:.2f}" if (i, b) in by else "-" for i in impls]
        over = by.get(("gang/numpy", b), 0) - by.get(("C gang-bench", b), 0) if ("C gang-bench", b) in by else None
        speed = by[("torch/gloo", b)] / by[("torch/gang", b)] if ("torch/gloo", b) in by and ("torch/gang", b) in by else None
        vs_mpi = by[("mpi4py", b)] / by[("gang/numpy", b)] if ("mpi4py", b) in by and ("gang/numpy", b) in by else None
        extra = [f"{over:+.2f}" if over is not None else "-",
                 f"{speed:.1f}x" if speed else "-",
                 f"{vs_mpi:.2f}x" if vs_mpi else "-"]
        lines.append(f"| {LABELS[b]} | " + " | ".join(cells + extra) + " |")
    table = "\n".join(lines) + "\n"
    with open(base + ".md", "w") as f:
        f.write(table)
    with open(base + ".json", "w") as f:
        json.dump(rows, f, indent=1)
    print(table)
    print(f"wrote {base}.md and {base}.json")
    if not shutil.which("gnuplot"):
        print("gnuplot not found: no PNG")
        return
    dat = base + ".dat"
    with open(dat, "w") as f:
        for b in SIZES:
            f.write(f"{b} " + " ".join(f"{by.get((i, b), float('nan'))}" for i in impls) + "\n")
    plots = ", ".join(f"'{dat}' using 1:{k + 2} with linespoints title '{name}'" for k, name in enumerate(impls))
    script = f"""
set terminal pngcairo size 900,600 noenhanced
set output '{base}.png'
set title 'all_reduce float32 from Python, {args.ranks} ranks, one machine ({stamp}, {commit})'
set logscale xy
set xlabel 'bytes'
set ylabel 'microseconds per call'
set key left top
set grid
set xtics ('8 B' 8, '1 KiB' 1024, '1 MiB' 1048576, '64 MiB' 67108864)
plot {plots}
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.remove(dat)
    print(f"wrote {base}.png")


if __name__ == "__main__":
    sys.exit(main())
