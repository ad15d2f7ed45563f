import torch

from gang import ProcessGroupGang, ReduceOperation, create_parallel_gangs
from gang.device import get_default_device

# Get the default CUDA or CPU device of the process.
device = get_default_device()

# Depending on the device creates a ProcessGroup with NCCL or Gloo backend.
root_gang = ProcessGroupGang.create_default_process_group(device)

# Create data and tensor parallel gangs.
gangs = create_parallel_gangs(root_gang, tp_size=8)

print(f"Root Gang: {gangs.root.size}/{gangs.root.rank}")
print(f"Tensor Parallel Gang: {gangs.tp.rank}/{gangs.tp.size}")

tensor = torch.ones((8, 8), device=device)

# All reduce on tensor parallel ranks.
gangs.tp.all_reduce(tensor, ReduceOperation.SUM)
