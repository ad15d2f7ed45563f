#!/usr/bin/python3
"""Runs examples/train_ft as R replica groups under one lighthouse
(gangrun --replica-groups) and, with --chaos N, injects a random fault every
N committed steps; gangrun starts a group again when it ends, and it heals
from the others. Then it checks what must hold whatever failed:

  oracle      with --same-data (the default) every group trains on the
              same data, so each group's rank r must end with the
              parameters of a fault-free run (one group, no faults, run
              first, or last with --end-after-faults), within
              --tolerance (relative)
  never back  the job's committed step -- the highest step the latest
              incarnation of any group has committed -- never goes back,
              and no incarnation commits a step twice
  no hang     no commit by any group for --hang-s seconds while the
              lighthouse is up
  restarts    only a group a fault hit starts again: a survivor never
              exits because another group failed
  faults      every fault asked for was injected (none skipped)
  detection   after a fault that takes a group out (its last move: the
              kill that lands in a configure, a heal or a restart), the
              survivors commit again in another quorum within the
              lighthouse's heartbeat timeout + 0.3 s (--detect-slack-s)

  examples/train_ft.py                                   3 groups, no faults
  examples/train_ft.py --groups 4 --chaos 10 --faults all --count 50
  examples/train_ft.py --worker python --chaos 10 --faults all --count 10
                       (torch DDP over ManagedProcessGroup, one rank a group;
                       the faults on a group's ranks are left out)

Faults (--faults, a comma list, or "all"):
  kill            SIGKILL of every process of a group
  kill-rank       SIGKILL of one non-zero rank of a group (its group's own
                  gang breaks: the group must exit by itself)
  stop            SIGSTOP of a whole group, SIGCONT 1.5-3.5 s later
  stop-skew       SIGSTOP of a group's last rank, then of its other ranks
                  0-50 ms later; SIGCONT to all 3 s later
  kill-restart    a group killed, and killed again 20-120 ms after it has
                  started again (a dead incarnation in the next quorum)
  kill-configure  a group killed; when it has started again, another group
                  killed 0-150 ms later (while the survivors configure)
  kill-heal       a group killed; when it has started again, it or a group
                  it may heal from killed 0-300 ms later (during the heal;
                  use --state-mib to make the heal last)
  two             two groups killed at once
  lh-kill         the lighthouse killed, started again on its port 0.3-2 s
                  later
  lh-stop         the lighthouse stopped (SIGSTOP) for 3 s
--json writes every figure and every fault."""

import argparse
import json
import os
import random
import re
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

LINE = re.compile(r"^\[g(\d+)/rank(\d+)\]:train_ft: (.*)$")
KV = re.compile(r"(\w+)=(\|[^|]*\||\S+)")
FAULTS = ["kill", "kill-rank", "stop", "stop-skew", "kill-restart",
          "kill-configure", "kill-heal", "two", "lh-kill", "lh-stop"]
# Faults after which the survivors must go on within the detection bound.
TIMED = {"kill", "kill-rank", "stop", "stop-skew", "kill-restart",
         "kill-configure", "kill-heal", "two"}


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


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def environ(pid):
    """A process's environment (b"NAME=value" items), None if it is gone."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return None


def by_local_rank(pids):
    """Worker processes in LOCAL_RANK order (gone ones left out)."""
    ws = []
    for w in pids:
        env = environ(w)
        if env is None:
            continue
        lr = [e for e in env if e.startswith(b"LOCAL_RANK=")]
        ws.append((int(lr[0][11:]) if lr else 0, w))
    return [w for _, w in sorted(ws)]


def signal_all(pids, sig):
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


class Lighthouse:
    """A gang-lighthouse of the run's own, with the run's timeouts, that a
    fault may kill (and start again on the same port) or stop."""

    def __init__(self, args, env):
        self.args, self.env, self.port = args, env, 0
        self.stopped = False
        self.start()

    def start(self):
        a = self.args
        self.proc = subprocess.Popen(
            [os.path.join(a.build, "tools/gang-lighthouse/gang-lighthouse"),
             "--bind", f"127.0.0.1:{self.port}", "--http", "off",
             "--heartbeat-timeout", f"{a.heartbeat_timeout_ms}ms",
             "--join-timeout", f"{a.join_timeout_ms}ms",
             "--quorum-tick", "20ms"],
            stdout=subprocess.PIPE, text=True, env=self.env)
        port = self.proc.stdout.readline().strip()
        if not port.isdigit():
            raise SystemExit(f"train_ft.py: the lighthouse did not start "
                             f"(said {port!r})")
        self.port = int(port)

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def close(self):
        if self.stopped:
            self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        self.proc.wait()


def worker_command(args):
    """The program of a replica group: train_ft (C, tensor parallel over
    --nproc ranks) or examples/python/train_ddp_ft.py (torch DDP over
    ManagedProcessGroup, one rank), which speaks the same lines."""
    if args.worker == "c":
        return [os.path.join(args.build, "examples/train_ft")]
    here = os.path.dirname(os.path.abspath(__file__))
    return [args.python, os.path.join(here, "python", "train_ddp_ft.py"),
            "--ddp", args.ddp]


def worker_args(args, steps, faulty, dump):
    """The worker's arguments after its program. --step-ms only sleeps:
    the fault-free run, whose parameters the oracle compares, ends with
    the same ones unpaced (test_train_ft: 20 s -> 15 s)."""
    a = ["--steps", str(steps),
         "--timeout-ms", str(args.timeout_ms),
         "--state-mib", str(args.state_mib),
         "--step-ms", str(args.step_ms if faulty else 0)]
    if args.same_data:
        a += ["--same-data"]
    if dump:
        a += ["--dump", dump]
    if faulty and args.end_after_faults:
        a += ["--steps-file", args.steps_file]
    return a


class Job:
    """gangrun --replica-groups running train_ft, and what its lines say."""

    def __init__(self, args, groups, steps, lh_port, env, dump, faulty):
        self.args, self.groups = args, groups
        self.commits = []  # (t, group, start index, kv) of commit lines
        self.steps = []  # (group, kv) of every step line
        self.starts = {g: [] for g in range(groups)}  # start times
        self.done = []  # (group, rank, kv)
        self.other = []
        self.last_commit = time.monotonic()
        self.lock = threading.Lock()
        env = dict(env)
        env["GANG_LIGHTHOUSE"] = f"127.0.0.1:{lh_port}"
        if args.worker == "python":
            py = os.path.abspath(os.path.join(args.build, "python"))
            env["PYTHONPATH"] = os.pathsep.join(
                x for x in (py, env.get("PYTHONPATH")) if x)
        cmd = [os.path.join(args.build, "tools/gangrun/gangrun"),
               "--replica-groups", str(groups),
               "--nproc-per-node", str(args.nproc),
               "--max-restarts", "1000000" if faulty else "0",
               "--term-grace", "1s",
               *worker_command(args),
               *worker_args(args, steps, faulty, dump)]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, env=env)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self, stream=None):
        for raw in stream or self.proc.stdout:
            self.take(raw.rstrip("\n"))

    def take(self, line):
        """One line of a group's output (gangrun's [g<G>/rank<R>]: prefix)."""
        m = LINE.match(line)
        now = time.monotonic()
        with self.lock:
            if m is None:
                self.other.append(line)
                if self.args.verbose:
                    print(line, flush=True)
                return
            g, rank, rest = int(m.group(1)), int(m.group(2)), m.group(3)
            if rest.startswith("group ") and rank == 0:
                self.starts[g].append(now)
                return
            kv = parse_kv(rest)
            if rest.startswith("done"):
                self.done.append((g, rank, kv))
            elif not ("step" in kv and "quorum" in kv):
                self.other.append(line)  # a worker's own words: errors
                if self.args.verbose:
                    print(line, flush=True)
            else:
                self.steps.append((g, kv))
                if kv["commit"]:
                    self.commits.append(
                        (kv["t"], g, len(self.starts[g]), kv))
                    self.last_commit = now
                if self.args.verbose:
                    print(line, flush=True)
                elif kv["step"] % self.args.print_every == 0 and \
                        kv["commit"]:
                    print(f"group {g}: step {kv['step']:5d}  quorum "
                          f"{kv['quorum']:4d}  participants "
                          f"{kv['participants']}  loss {kv['loss']:.5f}",
                          flush=True)

    def max_step(self):
        with self.lock:
            return max((kv["step"] for _, _, _, kv in self.commits),
                       default=0)

    def workers(self, g):
        """The processes of replica group g (its gangrun's children), by
        local rank."""
        for pid in children(self.proc.pid):
            env = environ(pid)
            if env is not None and \
                    f"GANG_REPLICA_GROUP={g}".encode() in env:
                return by_local_rank(children(pid))
        return []

    def starts_of(self, g):
        with self.lock:
            return len(self.starts[g])

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.reader.join(5)


class Chaos:
    """Injects the faults; each fault is a dict with its kind, the groups
    it hit and when, filled in as it goes (some take several moves)."""

    def __init__(self, job, lh, args, rng):
        self.job, self.lh, self.args, self.rng = job, lh, args, rng
        self.faults = []
        self.pending = []  # (time, callable) moves still to make

    def later(self, delay, fn):
        self.pending.append((time.monotonic() + delay, fn))

    def tick(self):
        now = time.monotonic()
        due = [p for p in self.pending if p[0] <= now]
        self.pending = [p for p in self.pending if p[0] > now]
        for _, fn in due:
            fn()

    def busy(self):
        return bool(self.pending)

    def kill_group(self, f, g):
        ws = self.job.workers(g)
        if not ws:
            return False
        signal_all(ws, signal.SIGKILL)
        f["moves"].append({"what": "kill", "group": g,
                           "t": time.monotonic(), "pids": ws})
        return True

    def after_restart(self, f, g, starts, delay, fn, waited=0.0):
        """Calls fn once group g has started again (a start line beyond
        `starts`), `delay` seconds after."""
        if self.job.starts_of(g) > starts:
            self.later(delay, fn)
        elif waited < 60:
            self.later(0.005, lambda: self.after_restart(
                f, g, starts, delay, fn, waited + 0.005))
        else:
            f["incomplete"] = True

    def inject(self, kind):
        rng, G = self.rng, self.args.groups
        g = rng.randrange(G)
        other = rng.choice([x for x in range(G) if x != g]) if G > 1 else g
        f = {"kind": kind, "group": g, "t": time.monotonic(),
             "step": self.job.max_step(), "moves": []}
        starts = self.job.starts_of(g)
        if kind == "kill":
            if not self.kill_group(f, g):
                return None
        elif kind == "kill-rank":
            ws = self.job.workers(g)
            if len(ws) < 2:
                return None
            victim = ws[rng.randrange(1, len(ws))]
            signal_all([victim], signal.SIGKILL)
            f["moves"].append({"what": "kill-rank", "group": g,
                               "t": time.monotonic(), "pids": [victim]})
        elif kind in ("stop", "stop-skew"):
            ws = self.job.workers(g)
            if not ws:
                return None
            if kind == "stop":
                signal_all(ws, signal.SIGSTOP)
                hold = rng.uniform(1.5, 3.5)
            else:
                signal_all(ws[-1:], signal.SIGSTOP)
                time.sleep(rng.uniform(0, 0.05))
                signal_all(ws[:-1], signal.SIGSTOP)
                hold = 3.0
            f["moves"].append({"what": "stop", "group": g,
                               "t": time.monotonic(), "pids": ws,
                               "hold_s": hold})

            def cont():
                signal_all(ws, signal.SIGCONT)
                f["cont_t"] = time.monotonic()
            self.later(hold, cont)
        elif kind == "kill-restart":
            if not self.kill_group(f, g):
                return None
            self.after_restart(f, g, starts, rng.uniform(0.02, 0.12),
                               lambda: self.kill_group(f, g))
        elif kind == "kill-configure":
            if not self.kill_group(f, g):
                return None
            self.after_restart(f, g, starts, rng.uniform(0, 0.15),
                               lambda: self.kill_group(f, other))
        elif kind == "kill-heal":
            if not self.kill_group(f, g):
                return None
            victim = g if rng.random() < 0.5 else other
            self.after_restart(f, g, starts, rng.uniform(0, 0.3),
                               lambda: self.kill_group(f, victim))
        elif kind == "two":
            if G < 3:
                return None
            if not self.kill_group(f, g) or not self.kill_group(f, other):
                return None
        elif kind == "lh-kill":
            self.lh.kill()
            f["moves"].append({"what": "lh-kill", "t": time.monotonic()})
            self.later(rng.uniform(0.3, 2.0), self.lh.start)
        elif kind == "lh-stop":
            self.lh.proc.send_signal(signal.SIGSTOP)
            self.lh.stopped = True
            f["moves"].append({"what": "lh-stop", "t": time.monotonic()})

            def cont():
                self.lh.proc.send_signal(signal.SIGCONT)
                self.lh.stopped = False
            self.later(3.0, cont)
        self.faults.append(f)
        return f


def check_never_back(job, faults=()):
    """The job's committed step -- the highest step committed by the
    latest incarnation of a group that is alive -- never goes back; an
    incarnation never commits a step twice. A group killed stops counting
    at its kill, so a fault that takes the only groups holding the latest
    step shows as a step back at the survivors' next commit. Returns the
    problems found."""
    bad = []
    last = {}  # group -> (start index, step)
    events = [(t, 1, g, inc, kv) for t, g, inc, kv in job.commits]
    for f in faults:
        for mv in f["moves"]:
            if mv["what"] in ("kill", "kill-rank") and "group" in mv:
                events.append((mv["t"], 0, mv["group"], None, None))
    job_step = 0
    dead = {}  # group -> the start index it was killed in
    for t, is_commit, g, inc, kv in sorted(events, key=lambda e: (e[0], e[1])):
        if not is_commit:
            if g in last:
                dead[g] = last.pop(g)[0]
            continue
        if inc <= dead.get(g, -1):
            continue  # the killed incarnation's line, read late
        prev_inc, prev_step = last.get(g, (-1, 0))
        if inc < prev_inc:
            continue  # a dead incarnation's line, read late
        if inc > prev_inc:
            prev_step = 0
        if kv["step"] <= prev_step:
            bad.append(f"group {g} (start {inc}) committed step {kv['step']} "
                       f"after step {prev_step}")
        last[g] = (inc, kv["step"])
        now = max(s for _, s in last.values())
        if now < job_step:
            bad.append(f"the job's committed step went back from {job_step} "
                       f"to {now} (group {g}, start {inc})")
        job_step = max(job_step, now)
    return bad


def check_restarts(job, faults):
    """Every start of a group beyond its first follows a fault on it."""
    bad = []
    hits = {}
    for f in faults:
        for mv in f["moves"]:
            if "group" in mv:
                hits.setdefault(mv["group"], []).append(mv["t"])
    for g, starts in job.starts.items():
        avail = sorted(hits.get(g, []))
        for t in starts[1:]:
            before = [x for x in avail if x < t]
            if not before:
                bad.append(f"group {g} started again at {t:.3f} with no fault "
                           f"on it: a survivor exited")
                continue
            avail.remove(before[-1])
    return bad


def detection(job, faults, hb_s):
    """For each fault that takes groups out: from its first move, the first
    commit by a group it did not hit, in a quorum newer than the last one
    committed before the fault."""
    out = []
    commits = sorted(job.commits, key=lambda c: c[0])
    for f in faults:
        if f["kind"] not in TIMED or not f["moves"]:
            continue
        # From the last move: a kill that lands in a configure or a heal
        # after a restart, or the second kill of a restarted group, is the
        # one the survivors must get over.
        t0 = f["moves"][-1]["t"]
        hit = {mv["group"] for mv in f["moves"] if "group" in mv}
        # Each survivor's quorum before the fault: the next commit in
        # another one (ids restart with a new lighthouse: compare, do not
        # order).
        before = {}
        for t, g, _, kv in commits:
            if t < t0:
                before[g] = kv["quorum"]
        nxt = [t for t, g, _, kv in commits
               if t > t0 and g not in hit and kv["quorum"] != before.get(g)]
        f["next_commit_ms"] = (nxt[0] - t0) * 1000 if nxt else None
        out.append(f)
    return out


def read_f32(path):
    with open(path, "rb") as fh:
        data = fh.read()
    return struct.unpack(f"{len(data) // 4}f", data)


def oracle(dump, ref_dump, nproc, tol):
    """Each group's rank r against the fault-free run's rank r: the
    largest relative difference, and the problems."""
    bad, worst = [], 0.0
    refs = {}
    for name in os.listdir(ref_dump):
        r = int(name.rsplit(".rank", 1)[1].split(".")[0])
        refs[r] = read_f32(os.path.join(ref_dump, name))
    if sorted(refs) != list(range(nproc)):
        return [f"the fault-free run wrote ranks {sorted(refs)}"], worst
    seen = 0
    for name in sorted(os.listdir(dump)):
        r = int(name.rsplit(".rank", 1)[1].split(".")[0])
        got = read_f32(os.path.join(dump, name))
        want = refs[r]
        if len(got) != len(want):
            bad.append(f"{name}: {len(got)} parameters, the fault-free run "
                       f"{len(want)}")
            continue
        d = max(abs(a - b) / (1.0 + abs(b)) for a, b in zip(got, want))
        worst = max(worst, d)
        if not d <= tol:
            bad.append(f"{name}: {d:.3g} (relative) from the fault-free run")
        seen += 1
    return bad, worst


# --end-after-faults: the steps the groups go on after the last fault.
END_MARGIN = 40


def all_back(job, chaos, groups):
    """Every group is in and has committed, since the last fault ended (a
    stopped group's SIGCONT), a step at least the job's step then --
    healed, not a step a resumed group had decided before its stop. The
    next fault waits for it, so that faults never pile up into a total
    loss (two groups killed while the third is still behind), and so does
    the first (a group that starts late, such as a python one importing
    torch, must be in before it)."""
    t_last = -1.0
    if chaos.faults:
        lf = chaos.faults[-1]
        t_last = max([mv["t"] for mv in lf["moves"]] +
                     [lf.get("cont_t", lf["t"])])
    with job.lock:
        floor = max((kv["step"] for t, _, _, kv in job.commits
                     if t <= t_last), default=0)
        fresh = {g for t, g, _, kv in job.commits
                 if t > t_last + 0.5 and kv["step"] >= floor}
    return len(fresh) >= groups


def run(args, groups, steps, faulty, dump, rng, env, lh, job_class=None,
        chaos_class=None):
    """Runs the job (job_class, default Job) with faults (chaos_class,
    default Chaos) to its end: the job, the faults, the hangs."""
    job = (job_class or Job)(args, groups, steps, lh.port, env, dump, faulty)
    job.end_step = None
    chaos = (chaos_class or Chaos)(job, lh, args, rng)
    kinds = args.kinds
    deck = []
    hangs = 0
    deadline = time.monotonic() + args.max_s
    next_fault = args.chaos
    try:
        while job.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
            chaos.tick()
            now = time.monotonic()
            lh_away = lh.stopped or lh.proc.poll() is not None
            with job.lock:
                idle = now - job.last_commit
            if lh_away:
                with job.lock:
                    job.last_commit = now
            elif idle > args.hang_s:
                print(f"train_ft.py: no commit for {args.hang_s} s: a hang",
                      flush=True)
                hangs += 1
                break
            if not faulty or not args.chaos or chaos.busy():
                continue
            if len(chaos.faults) >= args.count:
                # --end-after-faults: the job ends END_MARGIN steps after
                # every group is back from the last fault.
                if args.end_after_faults and job.end_step is None and \
                        all_back(job, chaos, groups):
                    job.end_step = min(steps, job.max_step() + END_MARGIN)
                    with open(args.steps_file + ".tmp", "w") as f:
                        f.write(f"{job.end_step}\n")
                    os.replace(args.steps_file + ".tmp", args.steps_file)
                    print(f"train_ft.py: the faults are over: the job ends "
                          f"at step {job.end_step}", flush=True)
                continue
            step = job.max_step()
            if step < next_fault or step > steps - getattr(args, "tail", 40):
                continue
            if not all_back(job, chaos, groups):
                continue
            # Every kind once, in a random order, then again: a run of at
            # least as many faults as kinds has each of them.
            if not deck:
                deck = rng.sample(kinds, len(kinds))
            f = chaos.inject(deck.pop())
            if f is None:
                continue
            print(f"train_ft.py: fault {len(chaos.faults)}: {f['kind']} "
                  f"(group {f['group']}) at step {f['step']}", flush=True)
            next_fault = step + args.chaos
        if job.proc.poll() is None:
            hangs += hangs == 0
    finally:
        for _, fn in chaos.pending:  # let stopped processes go
            fn()
        job.stop()
    return job, chaos.faults, hangs


def parser(doc=__doc__):
    """The command line, which examples/train_ft_hosts.py extends."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--worker", choices=["c", "python"], default="c",
                    help="train_ft (C) or examples/python/train_ddp_ft.py "
                    "(torch DDP; one rank per group)")
    ap.add_argument("--ddp", choices=["torch", "torchft"], default="torch",
                    help="python worker: torch's DDP over "
                    "ManagedProcessGroup, or gang.ft.DistributedDataParallel")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="python worker: the interpreter (Debian's has "
                    "torch)")
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=2,
                    help="ranks per group (tensor parallel)")
    ap.add_argument("--steps", type=int, default=0,
                    help="steps to commit (default: enough for the faults)")
    ap.add_argument("--chaos", type=int, default=0,
                    help="a random fault every N committed steps")
    ap.add_argument("--count", "--kills", type=int, default=10,
                    help="faults to inject")
    ap.add_argument("--faults", default="kill,kill-rank,stop,stop-skew",
                    help=f"kinds to draw from, or 'all': {','.join(FAULTS)}")
    ap.add_argument("--state-mib", type=int, default=0)
    ap.add_argument("--timeout-ms", type=int, default=1000,
                    help="collective and commit vote deadline")
    ap.add_argument("--heartbeat-timeout-ms", type=int, default=1000,
                    help="the lighthouse's")
    ap.add_argument("--join-timeout-ms", type=int, default=5000,
                    help="the lighthouse's")
    ap.add_argument("--step-ms", type=int, default=0)
    ap.add_argument("--end-after-faults", action="store_true",
                    help=f"with --chaos: end the job {END_MARGIN} steps "
                    "after every "
                    "group is back from the last fault (--steps is then "
                    "a cap), and run the fault-free run after it, for as "
                    "many steps")
    ap.add_argument("--hang-s", type=float, default=20.0)
    ap.add_argument("--max-s", type=float, default=3600.0)
    ap.add_argument("--detect-slack-s", type=float, default=0.3,
                    help="bound on the survivors' next commit after a "
                    "fault, beyond the heartbeat timeout")
    ap.add_argument("--no-oracle", dest="same_data", action="store_false",
                    help="each group on its own share of the data (no "
                    "fault-free comparison)")
    ap.add_argument("--tolerance", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=None,
                    help="random by default (printed)")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--print-every", type=int, default=20)
    ap.add_argument("--verbose", action="store_true")
    return ap


def parse(ap, faults=FAULTS):
    """The arguments, checked, with the faults' kinds and the steps."""
    args = ap.parse_args()
    args.kinds = faults if args.faults == "all" else args.faults.split(",")
    if args.worker == "python":
        args.nproc = 1
        if args.faults in ("all", ap.get_default("faults")):
            args.kinds = [k for k in args.kinds
                          if k not in ("kill-rank", "stop-skew")]
        for k in ("kill-rank", "stop-skew"):
            if k in args.kinds:
                ap.error(f"fault '{k}' needs groups of several ranks: the "
                         f"python worker's have one")
    for k in args.kinds:
        if k not in faults:
            ap.error(f"unknown fault '{k}': {', '.join(faults)}")
    if args.end_after_faults and not args.chaos:
        ap.error("--end-after-faults needs --chaos")
    if args.steps == 0:
        # A fault waits until every group is back and has committed since
        # the last one (a stopped group is away for seconds), and none
        # comes in the last 40 steps.
        args.steps = args.count * (args.chaos + 150) + 100 if args.chaos \
            else 200
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    print(f"train_ft.py: seed {args.seed}", flush=True)
    return args


def main():
    args = parse(parser())
    rng = random.Random(args.seed)
    env = dict(os.environ)
    env.setdefault("GANG_STORE_SECRET", os.urandom(16).hex())
    tmp = tempfile.mkdtemp(prefix="train_ft-")
    job, faults, hangs, dump, ref, problems = run_jobs(
        args, rng, env, tmp, lambda: Lighthouse(args, env))
    return judge(args, job, faults, hangs, dump, ref, tmp, problems)


def run_jobs(args, rng, env, tmp, lighthouse, job_class=None,
             chaos_class=None):
    """The fault-free run (with --same-data: first, or with
    --end-after-faults last, for the steps the faulty run ended at) and
    the faulty run, each under a lighthouse() of its own: the faulty
    job, its faults, its hangs, the two runs' parameter directories and
    the problems found."""
    problems = []
    ref, dump = os.path.join(tmp, "ref"), os.path.join(tmp, "run")
    os.mkdir(dump)
    args.steps_file = os.path.join(tmp, "steps")

    def one(groups, faulty, out):
        lh = lighthouse()
        try:
            return run(args, groups, args.steps, faulty, out, rng, env, lh,
                       job_class, chaos_class)
        finally:
            lh.close()

    def reference():
        if not args.same_data:
            return
        os.mkdir(ref)
        rjob, _, rh = one(1, False, ref)
        if rjob.proc.returncode != 0 or rh:
            problems.append(f"the fault-free run failed (status "
                            f"{rjob.proc.returncode})")

    if not args.end_after_faults:
        reference()
    job, faults, hangs = one(args.groups, True,
                             dump if args.same_data else None)
    if job.end_step is not None:
        args.steps = job.end_step
    if args.end_after_faults:
        reference()
    return job, faults, hangs, dump, ref, problems


def judge(args, job, faults, hangs, dump, ref, tmp, problems, more=None):
    """Checks the run, prints the summary and PASS or FAIL, returns the
    exit status; more(job, faults) adds (problems, lines to print)."""
    problems = list(problems)
    rc = job.proc.returncode
    if rc != 0:
        problems.append(f"exit status {rc}")
    if hangs:
        problems.append("a hang")
    done = [f for f in faults if not f.get("incomplete")]
    if args.chaos and len(done) < args.count:
        problems.append(f"{len(done)} of {args.count} faults injected")
    missing = set(args.kinds) - {f["kind"] for f in done}
    if args.chaos and args.count >= len(args.kinds) and missing:
        problems.append(f"no fault of kind {', '.join(sorted(missing))}")
    hashes = {}
    for g, rank, kv in job.done:
        if kv["step"] != args.steps:
            problems.append(f"group {g} rank {rank} ended at step "
                            f"{kv['step']}, not {args.steps}")
        hashes.setdefault(rank, set()).add(kv["hash"])
    finals = {(g, r) for g, r, _ in job.done}
    if len(finals) != args.groups * args.nproc:
        problems.append(f"{len(finals)} of {args.groups * args.nproc} ranks "
                        f"reported their parameters")
    for r, hs in sorted(hashes.items()):
        if len(hs) != 1:
            problems.append(f"rank {r}'s parameters differ between groups: "
                            f"{sorted(hs)}")
    back = check_never_back(job, faults)
    problems += back
    restarts = check_restarts(job, faults)
    problems += restarts
    worst = None
    if args.same_data and not problems:
        bad, worst = oracle(dump, ref, args.nproc, args.tolerance)
        problems += bad
    hb_s = args.heartbeat_timeout_ms / 1000
    timed = detection(job, faults, hb_s)
    late = [f for f in timed if f.get("next_commit_ms") is None or
            f["next_commit_ms"] > (hb_s + args.detect_slack_s) * 1000]
    for f in late:
        problems.append(f"fault {f['kind']} on group {f['group']} at step "
                        f"{f['step']}: the survivors' next commit "
                        f"{'never came' if f.get('next_commit_ms') is None else '%.0f ms later' % f['next_commit_ms']}"
                        f" (bound {(hb_s + args.detect_slack_s) * 1000:.0f} "
                        f"ms)")
    extra_lines = []
    if more is not None:
        extra, extra_lines = more(job, faults)
        problems += extra
    ok = not problems
    kinds = {}
    for f in faults:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    print(f"\ntrain_ft.py: {args.groups} groups x {args.nproc} ranks, "
          f"{args.steps} steps, {len(faults)} faults "
          f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}); "
          f"seed {args.seed}; exit status {rc}; "
          f"starts {sum(len(s) for s in job.starts.values())}; "
          f"job step back {len(back)}; unexplained restarts {len(restarts)}; "
          f"hangs {hangs}; oracle "
          f"{'%.3g' % worst if worst is not None else 'not run'} "
          f"(tolerance {args.tolerance:g})")
    xs = [f["next_commit_ms"] for f in timed
          if f.get("next_commit_ms") is not None]
    if xs:
        print(f"survivors' next commit after a fault: n {len(xs)}, median "
              f"{statistics.median(xs):.0f} ms, p90 {pct(xs, 90):.0f} ms, "
              f"max {max(xs):.0f} ms (bound "
              f"{(hb_s + args.detect_slack_s) * 1000:.0f} ms)")
        by = {}
        for f in (f for f in timed if f.get("next_commit_ms") is not None):
            by.setdefault(f["kind"], []).append(f["next_commit_ms"])
        for k, v in sorted(by.items()):
            print(f"  {k:15s} n {len(v):3d}  median {statistics.median(v):5.0f} ms"
                  f"  p90 {pct(v, 90):5.0f} ms  max {max(v):5.0f} ms")
    for line in extra_lines + [f"train_ft.py: {p}" for p in problems[:20]]:
        print(line)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": {k: v for k, v in vars(args).items()},
                       "exit_status": rc, "hangs": hangs,
                       "faults": faults, "oracle_worst": worst,
                       "problems": problems, "ok": ok}, fh, indent=1,
                      default=str)
    if not ok:
        print(f"train_ft.py: parameter dumps kept in {tmp}")
        if not args.verbose and job.other:
            print("train_ft.py: the job's last other lines (gangrun's, and "
                  "workers' that are not steps):")
            for line in job.other[-40:]:
                print(f"  {line}")
    else:
        for d in (os.path.join(tmp, "ref"), os.path.join(tmp, "run")):
            for n in os.listdir(d) if os.path.isdir(d) else []:
                os.unlink(os.path.join(d, n))
            if os.path.isdir(d):
                os.rmdir(d)
        if os.path.exists(args.steps_file):
            os.unlink(args.steps_file)
        os.rmdir(tmp)
    print(f"train_ft.py: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
