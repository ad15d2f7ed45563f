"""One rank of test_flight.py: with GANG_FLIGHT set, three all_reduces
and gang.flight_dump; without it, flight_dump raises InvalidUsageError
naming the setting. Prints "FLIGHT OK" at the end."""

import os

import numpy as np

import gang

root = gang.ProcessGroupGang.create_default_process_group("cpu")
if os.environ.get("GANG_FLIGHT", "0") != "0":
    a = np.ones(4, np.float32)
    for _ in range(3):
        root.all_reduce(a)
    gang.flight_dump("asked from Python")
else:
    try:
        gang.flight_dump()
        raise AssertionError("flight_dump without GANG_FLIGHT did not raise")
    except gang.InvalidUsageError as e:
        assert "GANG_FLIGHT" in str(e), e
root.close()
print("FLIGHT OK")
