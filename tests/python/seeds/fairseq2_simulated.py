import torch

from gang import FakeGang, Gang, ProcessGroupGang, ReduceOperation
from gang.device import get_default_device
from gang.env import get_world_size

def main() -> None:
    # Get the default CUDA or CPU device of the process.
    device = get_default_device()

    # Infer the world size from the `WORLD_SIZE` environment variable.
    world_size = get_world_size()

    # If only a single rank, create a fake gang.
    if world_size == 1:
        gang = FakeGang(device)
    else:
        gang = ProcessGroupGang.create_default_process_group(device)

    some_distributed_function(gang)


def some_distributed_function(gang: Gang) -> None:
    tensor = torch.ones((8, 8), device=gang.device)

    # All reduce on ranks.
    gang.all_reduce(tensor, ReduceOperation.SUM)
