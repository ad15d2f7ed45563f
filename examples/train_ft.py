#!/usr/bin/python3
"""Runs examples/train_ft as R replica groups under one lighthouse
(gangrun --replica-groups) and, with --chaos N, kills a random group every
N committed steps with SIGKILL; gangrun starts it again and it heals from
the others. At the end every group's rank r must hold bit-identical
parameters at the target step.

  examples/train_ft.py                                  3 groups, no kills
  examples/train_ft.py --groups 4 --chaos 10 --kills 100 --state-mib 64

For each kill it measures, from the moment of the kill (CLOCK_MONOTONIC,
which train_ft prints too):
  detect      the first survivor's error of the step it was in
  quorum      the survivors' next quorum without the dead group, ready
  configure   that quorum's rebuild of the replica gang (ms)
  rejoin      the restarted group's first committed step
  heal        the restarted group's receipt of the state (ms, bytes)
and counts committed steps lost (a survivor's step going back, or the job
continuing below a step committed before the kill) and hangs (no step
from a group for --hang-s seconds). --json writes every figure."""

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

LINE = re.compile(r"^\[g(\d+)/rank(\d+)\]:train_ft: (.*)$")
KV = re.compile(r"(\w+)=(\|[^|]*\||\S+)")


def parse_kv(text):
    out = {}
    for k, v in KV.findall(text):
        if v.startswith("|"):
            out[k] = v[1:-1]
            continue
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


class Job:
    def __init__(self, args):
        self.args = args
        self.steps = []  # (group, dict)
        self.done = []  # (group, rank, dict)
        self.other = []
        self.last_line = {}  # group -> monotonic time of its last step line
        self.lock = threading.Lock()
        build = args.build
        env = dict(os.environ)
        env.setdefault("GANG_STORE_SECRET", os.urandom(16).hex())
        # A lighthouse of our own, with the timeouts of the run (gangrun
        # would host one with torchft's defaults: 5 s heartbeats, 60 s
        # joins).
        self.lh = subprocess.Popen(
            [os.path.join(build, "tools/gang-lighthouse/gang-lighthouse"),
             "--bind", "127.0.0.1:0", "--http", "off",
             "--heartbeat-timeout", f"{args.heartbeat_timeout_ms}ms",
             "--join-timeout", f"{args.join_timeout_ms}ms",
             "--quorum-tick", "20ms"],
            stdout=subprocess.PIPE, text=True, env=env)
        port = self.lh.stdout.readline().strip()
        if not port.isdigit():
            raise SystemExit(f"train_ft.py: the lighthouse did not start "
                             f"(said {port!r})")
        env["GANG_LIGHTHOUSE"] = f"127.0.0.1:{port}"
        cmd = [
            os.path.join(build, "tools/gangrun/gangrun"),
            "--replica-groups", str(args.groups),
            "--nproc-per-node", str(args.nproc),
            "--max-restarts", "1000000",
            "--term-grace", "1s",
            os.path.join(build, "examples/train_ft"),
            "--steps", str(args.steps),
            "--timeout-ms", str(args.timeout_ms),
            "--state-mib", str(args.state_mib),
            "--step-ms", str(args.step_ms),
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, env=env)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self):
        for raw in self.proc.stdout:
            line = raw.rstrip("\n")
            m = LINE.match(line)
            now = time.monotonic()
            with self.lock:
                if m is None:
                    self.other.append(line)
                    if self.args.verbose:
                        print(line, flush=True)
                    continue
                g, rank, rest = int(m.group(1)), int(m.group(2)), m.group(3)
                kv = parse_kv(rest)
                if rest.startswith("done"):
                    self.done.append((g, rank, kv))
                elif "step" in kv and "quorum" in kv:
                    self.steps.append((g, kv))
                    self.last_line[g] = now
                    if self.args.verbose:
                        print(line, flush=True)
                    elif (
                            kv["step"] % self.args.print_every == 0 and
                            kv["commit"]):
                        print(f"group {g}: step {kv['step']:5d}  quorum "
                              f"{kv['quorum']:4d}  participants "
                              f"{kv['participants']}  loss {kv['loss']:.5f}",
                              flush=True)

    def max_step(self):
        with self.lock:
            return max((kv["step"] for _, kv in self.steps if kv["commit"]),
                       default=0)

    def group_pid(self, g):
        """The gangrun of replica group g."""
        for pid in children(self.proc.pid):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                continue
            if f"GANG_REPLICA_GROUP={g}".encode() in env:
                return pid
        return None


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def measure(job, g, t_kill, before, steps_from):
    """Figures of one kill of group g, from the lines logged after it."""
    with job.lock:
        earlier = job.steps[:steps_from]
        lines = job.steps[steps_from:]
    surv = [(gg, kv) for gg, kv in lines if gg != g]
    mine = [kv for gg, kv in lines if gg == g]
    q_before = max((kv["quorum"] for _, kv in earlier), default=0)
    f = {"group": g, "t_kill": t_kill, "step_before": before,
         "quorum_before": q_before}
    errs = [kv["error_t"] - t_kill for _, kv in surv
            if not kv["commit"] and kv["error_t"] > t_kill]
    f["detect_ms"] = min(errs) * 1000 if errs else None
    # The survivors' next quorum: the first step they commit in a quorum
    # formed after the kill.
    nxt = [kv for _, kv in surv if kv["commit"] and kv["quorum"] > q_before
           and kv["t_quorum"] > t_kill]
    if nxt:
        first = min(nxt, key=lambda kv: kv["t_quorum"])
        f["quorum_ms"] = (first["t_quorum"] - t_kill) * 1000
        f["configure_ms"] = first["configure_ms"]
    healed = [kv for kv in mine if kv["heal_bytes"] > 0]
    if healed:
        f["heal_ms"] = healed[0]["heal_ms"]
        f["heal_bytes"] = healed[0]["heal_bytes"]
    back = [kv for kv in mine if kv["commit"]]
    if back:
        f["rejoin_ms"] = (back[0]["t"] - t_kill) * 1000
        f["rejoin_step"] = back[0]["step"]
    # Lost: a survivor whose first commit after the kill does not go past
    # what it had committed before; the restarted group coming back below
    # the job's step at the kill.
    lost = 0
    for gg in {gg for gg, _ in surv}:
        had = max((kv["step"] for g2, kv in earlier
                   if g2 == gg and kv["commit"]), default=0)
        after = [kv["step"] for g2, kv in surv if g2 == gg and kv["commit"]]
        if after:
            lost = max(lost, had + 1 - after[0])
    if back:
        lost = max(lost, before + 1 - back[0]["step"])
    f["lost"] = max(0, lost)
    return f


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=2,
                    help="ranks per group (tensor parallel)")
    ap.add_argument("--steps", type=int, default=0,
                    help="steps to commit (default: enough for the kills)")
    ap.add_argument("--chaos", type=int, default=0,
                    help="kill a random group every N committed steps")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--state-mib", type=int, default=0)
    ap.add_argument("--timeout-ms", type=int, default=1000,
                    help="collective and commit vote deadline")
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=1000,
                    help="the lighthouse's")
    ap.add_argument("--join-timeout-ms", type=int, default=5000,
                    help="the lighthouse's")
    ap.add_argument("--step-ms", type=int, default=0)
    ap.add_argument("--hang-s", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--print-every", type=int, default=20)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    if args.steps == 0:
        args.steps = args.chaos * args.kills + 60 if args.chaos else 200
    rng = random.Random(args.seed)
    job = Job(args)
    kills = []
    hangs = 0
    deadline = time.monotonic() + 3600
    try:
        next_kill = args.chaos
        while job.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
            now = time.monotonic()
            with job.lock:
                stale = [g for g, t in job.last_line.items()
                         if now - t > args.hang_s]
            if stale:
                print(f"train_ft.py: groups {stale} logged no step for "
                      f"{args.hang_s} s: a hang", flush=True)
                hangs += 1
                break
            if not args.chaos or len(kills) >= args.kills:
                continue
            step = job.max_step()
            if step < next_kill or step > args.steps - 40:
                continue
            # Kill only with every group in: the last one back and healed.
            if kills and "rejoin_ms" not in measure(
                    job, kills[-1]["group"], kills[-1]["t_kill"],
                    kills[-1]["step_before"], kills[-1]["from"]):
                continue
            if kills:
                prev = kills[-1]
                prev.update(measure(job, prev["group"], prev["t_kill"],
                                    prev["step_before"], prev["from"]))
            g = rng.randrange(args.groups)
            gp = job.group_pid(g)
            workers = children(gp) if gp else []
            if not workers:
                continue
            with job.lock:
                start = len(job.steps)
            before = job.max_step()
            t_kill = time.monotonic()
            for w in workers:
                try:
                    os.kill(w, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            kills.append({"group": g, "t_kill": t_kill, "step_before": before,
                          "from": start})
            print(f"train_ft.py: kill {len(kills)}: group {g} (workers "
                  f"{workers}) at step {before}", flush=True)
            next_kill = before + args.chaos
        if job.proc.poll() is None:
            hangs += hangs == 0 and time.monotonic() >= deadline
    finally:
        if job.proc.poll() is None:
            os.killpg(job.proc.pid, signal.SIGTERM)
            try:
                job.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(job.proc.pid, signal.SIGKILL)
                job.proc.wait()
        job.reader.join(5)
        job.lh.terminate()
        job.lh.wait()
    for k in kills:
        k.update(measure(job, k["group"], k["t_kill"], k["step_before"],
                         k["from"]))
    rc = job.proc.returncode
    ok = rc == 0 and hangs == 0
    # Every group's rank r ends at the target with one hash.
    hashes = {}
    for g, rank, kv in job.done:
        if kv["step"] != args.steps:
            print(f"train_ft.py: group {g} rank {rank} ended at step "
                  f"{kv['step']}, not {args.steps}")
            ok = False
        hashes.setdefault(rank, set()).add(kv["hash"])
    finals = {(g, r) for g, r, _ in job.done}
    if len(finals) != args.groups * args.nproc:
        print(f"train_ft.py: {len(finals)} of {args.groups * args.nproc} "
              f"ranks reported their parameters")
        ok = False
    for r, hs in sorted(hashes.items()):
        if len(hs) != 1:
            print(f"train_ft.py: rank {r}'s parameters differ between groups: "
                  f"{sorted(hs)}")
            ok = False
    lost = sum(k["lost"] for k in kills)
    ok = ok and lost == 0
    print(f"train_ft.py: {args.groups} groups x {args.nproc} ranks, "
          f"{args.steps} steps, {len(kills)} kills; exit status {rc}; "
          f"parameters {'identical' if all(len(h) == 1 for h in hashes.values()) and hashes else 'DIFFER'}; "
          f"committed steps lost {lost}; hangs {hangs}")
    if kills:
        print("\n| from the kill | n | median | p90 | max |")
        print("|---|---:|---:|---:|---:|")
        for key, label in (("detect_ms", "detected (ms)"),
                           ("quorum_ms", "next quorum (ms)"),
                           ("configure_ms", "replica gang rebuilt (ms)"),
                           ("rejoin_ms", "killed group commits again (ms)"),
                           ("heal_ms", "state healed (ms)")):
            xs = [k[key] for k in kills if k.get(key) is not None]
            if xs:
                print(f"| {label} | {len(xs)} | {statistics.median(xs):.0f} | "
                      f"{pct(xs, 90):.0f} | {max(xs):.0f} |")
        hb = [k["heal_bytes"] for k in kills if k.get("heal_bytes")]
        if hb:
            print(f"\nhealed {hb[0]} bytes per group rank "
                  f"({hb[0] / 2**20:.1f} MiB)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "exit_status": rc, "hangs": hangs,
                       "lost": lost, "kills": kills,
                       "identical": all(len(h) == 1 for h in hashes.values()),
                       "ok": ok}, f, indent=1)
    print(f"train_ft.py: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
