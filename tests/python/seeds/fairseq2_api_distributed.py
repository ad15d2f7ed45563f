from gang import ProcessGroupGang, create_parallel_gangs
from gang.device import get_default_device

# Initialize distributed process group
device = get_default_device()
root_gang = ProcessGroupGang.create_default_process_group(device)

# Create parallel gangs with tensor parallelism
gangs = create_parallel_gangs(root_gang, tp_size=2)

print(f"Process rank: {gangs.root.rank}")
print(f"World size: {gangs.root.size}")
print(f"TP gang size: {gangs.tp.size}")
