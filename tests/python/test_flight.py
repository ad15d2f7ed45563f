"""gang.flight_dump writes each rank's flight record (GANG_FLIGHT), which
gang-flight reads back; without the setting it raises."""

import os
import subprocess

from conftest import BUILD, gangrun, rank_lines


def test_flight_dump(tmp_path, workers_dir):
    prefix = str(tmp_path / "fr.")
    out = gangrun(2, os.path.join(workers_dir, "flight.py"), extra_env={"GANG_FLIGHT": "8", "GANG_FLIGHT_DUMP": prefix})
    for r in range(2):
        assert "FLIGHT OK" in rank_lines(out, r), out
        text = open(prefix + str(r)).read()
        assert "reason=asked from Python" in text, text
        assert " seq=3 call=all_reduce count=4 dtype=float32 op=sum" in text, text
    tool = os.path.join(BUILD, "tools", "gang-flight", "gang-flight")
    p = subprocess.run([tool, prefix + "0", prefix + "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = p.stdout.decode()
    assert p.returncode == 0, text
    assert "finished them" in text, text


def test_flight_dump_off(workers_dir):
    out = gangrun(1, os.path.join(workers_dir, "flight.py"), extra_env={"GANG_FLIGHT": "0"})
    assert "FLIGHT OK" in rank_lines(out, 0), out
