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

# If 4 devices are used for intra-node parallelism, this function will
# create 2 intra-node gangs and 4 inter-node gangs by splitting `gangs.dp`
# as:
#   2 intra-node gangs of size 4:
#       [d0, d1, d2, d3], [d4, d5, d6, d7]
#   4 inter-node gangs of size 2:
#       [d0, d4], [d1, d5], [d2, d6], [d3, d7]
#
# At the end of the call, `gangs.rdp` (replicated) will point to the
# inter-node gang and `gangs.sdp` will point to the intra-node gang.
gangs = create_fsdp_gangs(gangs, intra_node_size=4)
