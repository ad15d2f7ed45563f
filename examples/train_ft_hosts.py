#!/usr/bin/python3
"""examples/train_ft.py across the hosts of a cluster in a box
(scripts/cluster; needs root): the lighthouse on host 0, replica group g on
host g % hosts, each group its own gangrun there. Faults hit hosts:

  host-kill   every process of a host other than the lighthouse's killed
              (scripts/cluster kill); its groups start again on it 1-2 s
              later, as a rebooted host's would
  unplug      a host other than the lighthouse's off the network for
              3-5 s (its link down: its processes run on, nothing they
              hold is closed), then back
  unplug-lh   the lighthouse's host (with group 0) off the network for
              3-5 s, then back

Beside train_ft.py's checks (the fault-free oracle, the committed step
never going back, no hang, no unexplained restart, the survivors' next
commit after a host's kill within the heartbeat timeout + slack), it
checks the split-brain guard: while a host is off the network (from
--split-grace-s after the unplug to the plug), the groups on it and the
others never both commit. And that, after every unplug, the groups on
both sides commit again.

  examples/train_ft_hosts.py --hosts 4 --groups 4 --chaos 10 --count 6
"""
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_ft as T  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLUSTER = os.path.join(REPO, "scripts", "cluster")
FAULTS = ["host-kill", "unplug", "unplug-lh"]
T.TIMED.add("host-kill")


def cluster(args, *argv, **kw):
    return subprocess.run([CLUSTER, *argv, "--name", args.cluster],
                          check=True, **kw)


def host_of(args, g):
    return g % args.hosts


class HostLighthouse(T.Lighthouse):
    """gang-lighthouse on host 0, bound to its address."""

    def start(self):
        a = self.args
        self.proc = subprocess.Popen(
            [CLUSTER, "exec", "0", "--name", a.cluster,
             os.path.join(a.build, "tools/gang-lighthouse/gang-lighthouse"),
             "--bind", f"{a.addr0}:{self.port}", "--http", "off",
             "--heartbeat-timeout", f"{a.heartbeat_timeout_ms}ms",
             "--join-timeout", f"{a.join_timeout_ms}ms",
             "--quorum-tick", "20ms"],
            stdout=subprocess.PIPE, text=True, env=self.env,
            start_new_session=True)
        port = self.proc.stdout.readline().strip()
        if not port.isdigit():
            raise SystemExit(f"train_ft_hosts.py: the lighthouse did not "
                             f"start on host 0 (said {port!r})")
        self.port = int(port)


class Procs:
    """The groups' gangruns as one process to train_ft's run(): running
    while a group runs or is about to start again; its status is the
    worst of the groups' last incarnations."""

    def __init__(self, job):
        self.job = job
        self.returncode = None

    def poll(self):
        with self.job.plock:
            if self.job.restarting or any(
                    p.poll() is None for p in self.job.procs.values()):
                return None
            self.returncode = max(p.returncode for p in
                                  self.job.procs.values())
            return self.returncode


class HostJob(T.Job):
    """One gangrun per replica group, each on its group's host."""

    def __init__(self, args, groups, steps, lh_port, env, dump, faulty):
        self.args, self.groups = args, groups
        self.commits, self.steps, self.done, self.other = [], [], [], []
        self.starts = {g: [] for g in range(groups)}
        self.last_commit = time.monotonic()
        self.lock, self.plock = threading.Lock(), threading.Lock()
        self.procs, self.readers, self.restarting = {}, [], 0
        self.env = dict(env)
        self.env["GANG_LIGHTHOUSE"] = f"{args.addr0}:{lh_port}"
        self.cmd = [os.path.join(args.build, "tools/gangrun/gangrun"),
                    "--standalone", "--nproc-per-node", str(args.nproc),
                    "--max-restarts", "1000000" if faulty else "0",
                    "--term-grace", "1s", *T.worker_command(args),
                    *T.worker_args(args, steps, faulty, dump)]
        self.proc = Procs(self)
        for g in range(groups):
            self.start_group(g)

    def start_group(self, g):
        env = dict(self.env)
        env["GANG_REPLICA_GROUP"] = str(g)
        p = subprocess.Popen(
            [CLUSTER, "exec", str(host_of(self.args, g)), "--name",
             self.args.cluster, *self.cmd],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True, env=env)
        with self.plock:
            self.procs[g] = p
        r = threading.Thread(target=self.read, args=(p.stdout,), daemon=True)
        r.start()
        self.readers.append(r)

    def workers(self, g):
        """Group g's training processes: the children of its gangrun
        (which `cluster exec` became), by local rank."""
        with self.plock:
            p = self.procs.get(g)
        return T.by_local_rank(T.children(p.pid)) if p is not None else []

    def stop(self):
        with self.plock:
            procs = list(self.procs.values())
        for p in procs:
            if p.poll() is None:
                for sig in (signal.SIGCONT, signal.SIGTERM):
                    try:
                        os.killpg(p.pid, sig)
                    except ProcessLookupError:
                        pass
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        for r in self.readers:
            r.join(5)


class HostChaos(T.Chaos):
    def inject(self, kind):
        if kind not in FAULTS:
            return super().inject(kind)
        a, rng = self.args, self.rng
        h = 0 if kind == "unplug-lh" else rng.randrange(1, a.hosts)
        on = [g for g in range(a.groups) if host_of(a, g) == h]
        f = {"kind": kind, "group": on[0] if on else -1, "host": h,
             "groups": on, "t": time.monotonic(),
             "step": self.job.max_step(), "moves": []}
        if kind == "host-kill":
            with self.job.plock:
                self.job.restarting += 1
            cluster(a, "kill", str(h))
            now = time.monotonic()
            f["moves"] += [{"what": "kill", "group": g, "t": now}
                           for g in on]

            def boot():
                for g in on:
                    self.job.start_group(g)
                with self.job.plock:
                    self.job.restarting -= 1
            self.later(rng.uniform(1.0, 2.0), boot)
        else:
            cluster(a, "unplug", str(h))
            now = time.monotonic()
            # Per group cut off: a restart of one (its worker giving up on
            # the lighthouse) is this fault's.
            f["moves"] += [{"what": "unplug", "group": g, "t": now}
                           for g in on] or [{"what": "unplug", "t": now}]
            hold = rng.uniform(3.0, 5.0)

            def plug():
                cluster(a, "plug", str(h))
                f["cont_t"] = time.monotonic()
            self.later(hold, plug)
        self.faults.append(f)
        return f


def split_brain(args):
    """The checks of the partitions: more(job, faults) for judge()."""
    grace = args.split_grace_s

    def check(job, faults):
        bad, lines = [], []
        commits = sorted(job.commits, key=lambda c: c[0])
        for f in faults:
            if f["kind"] not in ("unplug", "unplug-lh") or "cont_t" not in f:
                continue
            t0, t1 = f["moves"][0]["t"], f["cont_t"]
            cut = set(f["groups"])
            inside = [g for t, g, _, _ in commits
                      if t0 + grace <= t <= t1 and g in cut]
            outside = [g for t, g, _, _ in commits
                       if t0 + grace <= t <= t1 and g not in cut]
            after = {g for t, g, _, _ in commits if t > t1}
            lines.append(f"{f['kind']} host {f['host']} (groups "
                         f"{sorted(cut)}) for {t1 - t0:.1f} s: commits "
                         f"while apart {len(inside)} on it, {len(outside)} "
                         f"elsewhere; groups committing after "
                         f"{sorted(after)}")
            if inside and outside:
                bad.append(f"split brain: while host {f['host']} was off "
                           f"the network both sides committed ({len(inside)}"
                           f" on it, {len(outside)} elsewhere)")
            lost = set(range(args.groups)) - after
            if lost:
                bad.append(f"after host {f['host']} came back, groups "
                           f"{sorted(lost)} never committed again")
        return bad, lines
    return check


def self_test(args):
    """The partition check on made-up runs: it must flag both sides
    committing while apart and a group silent after the plug, and pass a
    run where only one side went on."""
    class Fake:
        pass

    def verdict(commits):
        job = Fake()
        job.commits = [(t, g, 0, {}) for t, g in commits]
        f = {"kind": "unplug", "host": 1, "groups": [1], "cont_t": 10.0,
             "moves": [{"what": "unplug", "group": 1, "t": 0.0}]}
        return split_brain(args)(job, [f])[0]
    late = args.split_grace_s + 1
    both = [(late, 0), (late, 1)] + [(11.0, g) for g in range(args.groups)]
    silent = [(late, 0)] + [(11.0, g) for g in range(args.groups) if g != 1]
    clean = [(late, 0), (0.1, 1)] + [(11.0, g) for g in range(args.groups)]
    if not verdict(both) or not verdict(silent) or verdict(clean):
        raise SystemExit("train_ft_hosts.py: the partition check is wrong")


def main():
    ap = T.parser(__doc__)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--cluster", default="ftc",
                    help="the cluster's name (scripts/cluster --name)")
    ap.add_argument("--net", default="10.82.0",
                    help="its network (scripts/cluster --net)")
    ap.add_argument("--split-grace-s", type=float, default=None,
                    help="after an unplug, how long both sides may still "
                    "commit the steps under way (default: the timeout + "
                    "the heartbeat timeout + 1 s)")
    ap.set_defaults(faults="host-kill,unplug,unplug-lh", groups=4)
    args = T.parse(ap, T.FAULTS + FAULTS)
    # No fault starts in the job's last 40 steps, nor here in the steps of
    # 7 s more: an unplugged group is away for up to 5 s and must find the
    # others still training when it is back (else it trains alone, with no
    # one to heal from, and the groups' parameters end apart).
    # And each fault gets 150 steps more than train_ft.py gives it: a
    # host away for 3-5 s takes as many steps of the others, and after the
    # lighthouse's host is back its group, alone and fast, had run 420
    # steps before the others joined again (seed 1121548705), leaving no
    # room for the third fault before the quiet end.
    quiet = int(7000 / max(args.step_ms, 5))
    args.tail = 40 + quiet
    if "--steps" not in sys.argv:
        args.steps += quiet + 150 * args.count
    if os.geteuid() != 0:
        print("train_ft_hosts.py: needs root (network namespaces)")
        return 77
    if args.split_grace_s is None:
        args.split_grace_s = (args.timeout_ms + args.heartbeat_timeout_ms) \
            / 1000 + 1.0
    self_test(args)
    rng = random.Random(args.seed)
    env = dict(os.environ)
    env.setdefault("GANG_STORE_SECRET", os.urandom(16).hex())
    cluster(args, "down", stdout=subprocess.DEVNULL)
    cluster(args, "up", str(args.hosts), "--net", args.net,
            stdout=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp(prefix="train_ft_hosts-")
    try:
        args.addr0 = cluster(args, "addr", "0", capture_output=True,
                             text=True).stdout.strip()
        job, faults, hangs, dump, ref, problems = T.run_jobs(
            args, rng, env, tmp, lambda: HostLighthouse(args, env), HostJob,
            HostChaos)
    finally:
        cluster(args, "down", stdout=subprocess.DEVNULL)
    return T.judge(args, job, faults, hangs, dump, ref, tmp, problems,
                   split_brain(args))


if __name__ == "__main__":
    sys.exit(main())
