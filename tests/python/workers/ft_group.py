"""A replica group of several ranks for test_ft.py, under
`gangrun --replica-groups`: the group is gangrun's world gang, the
lighthouse and the group's name come from gangrun's environment
(GANG_LIGHTHOUSE, GANG_RUN_ID). Each rank holds a shard of its own (rank r
of every group heals from rank r); gradients go through the managed gang.
Prints each rank's step, participants, batches and a hash of its shard."""

import hashlib
import sys

import numpy as np

import gang
from gang import ft

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 20

world = gang.ProcessGroupGang.create_default_process_group()
manager = ft.Manager(group=world, timeout=10, quorum_timeout=60)
shard = np.full(64, float(world.rank), np.float32)
shard += np.float32(sum(manager.replica_id().encode()) % 7)  # groups start apart
manager.register_state("shard", shard)
while manager.current_step() < STEPS:
    manager.start_quorum()
    grad = np.full(64, float(manager.replica_rank() + 1 + world.rank), np.float32)
    manager.gang.all_reduce(grad, gang.ReduceOperation.MEAN)
    if manager.should_commit():
        shard -= np.float32(0.01) * grad
digest = hashlib.sha256(shard.tobytes()).hexdigest()[:16]
print(f"done rank={world.rank} step={manager.current_step()} part={manager.num_participants()} "
      f"batches={manager.batches_committed()} hash={digest}", flush=True)
world.barrier()  # leave together: the group's ranks share a vote gang
manager.shutdown()
world.close()
