"""One replica group of one rank for test_ft.py: trains a small linear model
with momentum through gang.ft.Manager under the lighthouse the test hosts.

Every replica starts from parameters of its own (seeded by its name), so
only init_sync and healing make them alike. The step's batch comes from the
step number and is shared out by replica rank, so which replicas take part
changes who computes what, never what is learned. Runs until the step named
in --target-file (written by the test once it has seen what it waits for)
is committed, then writes a hash of its state. One line per step goes to
--log (one write each, O_APPEND)."""

import argparse
import hashlib
import os
import sys
import time

import numpy as np

from gang import ft

IN, OUT, BATCH = 16, 4, 48
LR, MOMENTUM = 0.05, 0.9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lighthouse", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--target-file", required=True)
    ap.add_argument("--step-ms", type=float, default=20)
    a = ap.parse_args()

    fd = os.open(a.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(line):
        os.write(fd, (line + "\n").encode())

    m = ft.Manager(lighthouse_addr=a.lighthouse, replica_id=a.name, timeout=1.0, quorum_timeout=30.0,
                   heartbeat_interval=0.1)
    rng = np.random.default_rng(sum(a.name.encode()))
    params = rng.standard_normal(IN * OUT + OUT).astype(np.float32)
    momentum = np.zeros(IN * OUT + OUT, np.float64)
    m.register_state("params", params)
    m.register_state("momentum", momentum)
    teacher = np.random.default_rng(7).standard_normal((IN, OUT)).astype(np.float32)
    log(f"start name={a.name} pid={os.getpid()} id={m.replica_id()} t={time.time():.6f}")

    target = None
    while True:
        if target is None and os.path.exists(a.target_file):
            with open(a.target_file) as f:
                target = int(f.read())
        if target is not None and m.current_step() >= target:
            break
        if m.current_step() > 100000:
            log("runaway")
            return 3
        m.start_quorum()
        m.wait_quorum()
        step, rr, n = m.current_step(), m.replica_rank(), m.num_participants()
        grad = np.zeros_like(params)
        if n > 0 and rr >= 0:
            x = np.random.default_rng(1000 + step).standard_normal((BATCH, IN)).astype(np.float32)
            y = x @ teacher
            lo, hi = rr * BATCH // n, (rr + 1) * BATCH // n
            w, b = params[: IN * OUT].reshape(IN, OUT), params[IN * OUT:]
            err = x[lo:hi] @ w + b - y[lo:hi]
            grad[: IN * OUT] = (x[lo:hi].T @ err).ravel() / max(1, hi - lo)
            grad[IN * OUT:] = err.mean(axis=0)
        m.allreduce(grad)
        time.sleep(a.step_ms / 1000)
        commit = m.should_commit()
        if commit:
            momentum *= MOMENTUM
            momentum += grad
            params -= (LR * momentum).astype(np.float32)
        t = m.last_timings()
        why = "" if commit else str(m.errored() or "quorum").replace("\n", " ")[:120]
        log(f"step name={a.name} pid={os.getpid()} step={m.current_step()} q={m.quorum_id()} part={n} "
            f"commit={int(commit)} heal={t['heal_bytes']} t={time.time():.6f} why={why}")

    h = hashlib.sha256(params.tobytes() + momentum.tobytes()).hexdigest()[:16]
    log(f"done name={a.name} pid={os.getpid()} step={m.current_step()} hash={h} "
        f"batches={m.batches_committed()}")
    m.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
