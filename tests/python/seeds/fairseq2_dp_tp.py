import torch

from gang import ProcessGroupGang, ReduceOperation, create_parallel_gangs
from gang.device import get_default_device

# Get the default CUDA or CPU device of the process.
device = get_default_device()

# Depending on the device creates a ProcessGroup with NCCL or Gloo backend.
root_gang = ProcessGroupGang.create_default_process_group(device)

# If there are 8 devices denoted by d0 to d7 and 2 devices are used for
# tensor parallelism (i.e. `tp_size` is 2), this function will create 4
# tensor parallel gangs and 2 data parallel gangs by splitting `root_gang`
# as:
#   4 tensor parallel gangs:
#       [d0, d1], [d2, d3], [d4, d5], [d6, d7]
#   2 data parallel gangs:
#       [d0, d2, d4, d6], [d1, d3, d5, d7]
gangs = create_parallel_gangs(root_gang, tp_size=8)

tensor = torch.ones((8, 8), device=device)

# All reduce on tensor parallel ranks.
gangs.tp.all_reduce(tensor, ReduceOperation.SUM)
