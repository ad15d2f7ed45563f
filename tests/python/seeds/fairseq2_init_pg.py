import torch

from gang import ProcessGroupGang, ReduceOperation
from gang.device import get_default_device

# Get the default CUDA or CPU device of the process.
device = get_default_device()

# Depending on the device creates a ProcessGroup with NCCL or Gloo backend.
gang = ProcessGroupGang.create_default_process_group(device)

tensor = torch.ones((8, 8), device=gang.device)

# All reduce on ranks.
gang.all_reduce(tensor, ReduceOperation.SUM)
