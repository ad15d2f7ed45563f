from gang import create_fake_gangs
from gang.device import Device

# Create fake gangs for local development
device = Device("cpu")
gangs = create_fake_gangs(device)

print(f"Root gang size: {gangs.root.size}")
print(f"Data parallel gang size: {gangs.dp.size}")
