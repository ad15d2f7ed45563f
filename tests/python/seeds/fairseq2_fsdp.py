import torch

from gang import ProcessGroupGang, create_fsdp_gangs, create_parallel_gangs
from gang.device import get_default_device

# Get the default CUDA or CPU device of the process.
device = get_default_device()

# Depending on the device creates a ProcessGroup with NCCL or Gloo backend.
root_gang = ProcessGroupGang.create_default_process_group(device)

# All size parameters (e.g. `tp_size`) for model parallelism strategies
# default to 1. If there are 8 devices, this call will only instantiate a
# new data parallel gang.
gangs = create_parallel_gangs(root_gang)

# At the end of the call, `gangs.sdp` (sharded) will point to the same gang
# as `gangs.dp` and `gangs.rdp` (replicated) will be set to a fake gang of
# size 1.
gangs = create_fsdp_gangs(gangs)
