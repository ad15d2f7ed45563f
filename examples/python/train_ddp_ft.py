"""torch DistributedDataParallel across replica groups that die and come
back (gang.ft; torchft's recipe).

    gangrun --replica-groups 3 --max-restarts 100 python3 examples/python/train_ddp_ft.py

Each replica group is one process holding the whole model: a torch MLP
under ``DistributedDataParallel(model, process_group=ManagedProcessGroup(
manager))``, stepped through ``OptimizerWrapper``. The quorum starts in
``zero_grad`` and runs while the forward and backward passes do; DDP's
gradient all_reduce goes through the manager (the mean over the groups
taking part); ``step`` runs the optimizer only when the step commits. A
group that (re)starts behind receives the parameters from one that is up
to date, at should_commit, and its own gradient of that step counts for
nothing. With ``--ddp torchft`` the model is wrapped by
gang.ft.DistributedDataParallel instead (a comm hook; torchft's class).

Under examples/train_ft.py (``--worker python``) it speaks train_ft's
lines, so the same chaos and the same checks apply: with --same-data every
group trains on the same batch of each step from the same start, so the
parameters at the end must equal a fault-free run's, whatever failed.
"""

import argparse
import hashlib
import os
import sys
import time

import torch
import torch.distributed as dist

import gang
from gang import ft

IN, HID, OUT, BATCH = 16, 64, 4, 96
LR = 0.05


def batch(step):
    """The step's data: a function of the step alone, the same in every
    group."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, IN, generator=g)
    w = torch.linspace(-1, 1, IN * OUT).reshape(IN, OUT)
    return x, torch.tanh(x @ w)


def model_of(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(IN, HID), torch.nn.Tanh(), torch.nn.Linear(HID, OUT))


def steps_now(path, steps):
    """steps, or the smaller number the file holds (examples/train_ft.py
    --end-after-faults writes it once, ahead of every group's step)."""
    if path is None:
        return steps
    try:
        with open(path) as f:
            v = int(f.read().split()[0])
        return v if 0 < v < steps else steps
    except (OSError, ValueError, IndexError):
        return steps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lighthouse", default=os.environ.get("GANG_LIGHTHOUSE"))
    ap.add_argument("--group", default=os.environ.get("GANG_RUN_ID", "replica"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--timeout-ms", type=int, default=1000)
    ap.add_argument("--state-mib", type=int, default=0)
    ap.add_argument("--step-ms", type=int, default=0)
    ap.add_argument("--steps-file", help="fewer steps, if this file holds a smaller number (read every step)")
    ap.add_argument("--same-data", action="store_true")
    ap.add_argument("--dump")
    ap.add_argument("--ddp", choices=["torch", "torchft"], default="torch")
    args = ap.parse_args()
    if not args.lighthouse:
        ap.error("no lighthouse: --lighthouse HOST:PORT or GANG_LIGHTHOUSE")
    torch.set_num_threads(1)

    restart = int(os.environ.get("GANG_RESTART_COUNT", "0"))
    # The groups of the first attempt start alike with --same-data (init_sync
    # makes them alike anyway); a group started again starts from garbage:
    # only healing brings it back.
    seed = 20261128 if args.same_data and restart == 0 else hash((args.group, restart)) & 0xFFFF
    model = model_of(seed)
    # More state for a late group to receive; +1 per commit in 1024 slots,
    # so a lost or repeated commit shows in the final hash.
    extra = torch.zeros(args.state_mib << 18)

    timeout = args.timeout_ms / 1000
    manager = ft.Manager(lighthouse_addr=args.lighthouse, replica_id=args.group, timeout=timeout,
                         quorum_timeout=30.0)
    for name, p in model.named_parameters():
        manager.register_state(name, p.data)
    if args.state_mib:
        manager.register_state("extra", extra)
    if args.ddp == "torchft":
        ddp = ft.DistributedDataParallel(manager, model)
    else:
        # find_unused_parameters=True: DDP keeps one gradient-bucket layout,
        # the same in a replica that starts late (ManagedProcessGroup).
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=ft.ManagedProcessGroup(manager),
                                                        find_unused_parameters=True)
    opt = ft.OptimizerWrapper(manager, torch.optim.SGD(model.parameters(), lr=LR))
    print(f"train_ft: group {args.group} ({manager.replica_id()}), 1 rank, DDP ({args.ddp}) over "
          f"ManagedProcessGroup, lighthouse {args.lighthouse}, {args.steps} steps", flush=True)

    def fatal(what, e):
        print(f"train_ft: {what} failed: {e}: the group exits", file=sys.stderr, flush=True)
        os._exit(3)

    while manager.current_step() < steps_now(args.steps_file, args.steps):
        step = manager.current_step()  # the step a counted participant computes
        try:
            opt.zero_grad()  # starts the quorum: it runs while we compute
            x, y = batch(step)
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()  # DDP: the mean over the groups, via the manager
            if args.step_ms:
                time.sleep(args.step_ms / 1000)
            committed = opt.step()  # the optimizer steps only if the step commits
            if committed and extra.numel():
                done = manager.current_step() - 1
                k = torch.arange(min(1024, extra.numel()))
                extra[(done * 4099 + k) % extra.numel()] += 1.0
        except gang.GangError as e:
            fatal("the step", e)
        t = manager.last_timings()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        phash = hashlib.blake2b(flat.numpy().tobytes(), digest_size=6).hexdigest()
        why = ""
        if not committed:
            e = manager.errored()
            why = str(e).replace("\n", " ").replace("|", " ") if e is not None else ""
        print(f"train_ft: group={args.group} step={manager.current_step()} quorum={manager.quorum_id()} "
              f"participants={manager.num_participants()} commit={int(committed)} loss={loss.item():.6f} "
              f"t={time.monotonic():.6f} quorum_ms={t['quorum_ms']:.1f} configure_ms={t['configure_ms']:.1f} "
              f"heal_ms={t['heal_ms']:.1f} heal_bytes={max(t['heal_bytes'], 0)} "
              f"heal_sent_bytes={max(-t['heal_bytes'], 0)} params={phash} why=|{why}|", flush=True)

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    if args.dump:
        with open(os.path.join(args.dump, f"{args.group}.rank0.f32"), "wb") as f:
            f.write(flat.numpy().astype("<f4").tobytes())
    h = hashlib.blake2b(flat.numpy().tobytes() + extra.numpy().tobytes(), digest_size=8).hexdigest()
    print(f"train_ft: done group={args.group} rank=0 step={manager.current_step()} hash={h}", flush=True)
    manager.shutdown()
    del ddp, opt
    return 0


if __name__ == "__main__":
    sys.exit(main())
