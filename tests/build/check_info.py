"""Checks `python3 -m gang.info --json` output for an installed gang:
every path it names lies under ROOT, and every version it reports (the
library's, the one the extension was built with, pip's when installed by
pip) is VERSION; with --pip, pip must have installed it. Used by
check_deb.sh and check_pip.sh.

usage: check_info.py INFO_JSON ROOT VERSION WHAT [--pip]
"""
import json
import sys

info, root, version, what = sys.argv[1:5]
d = json.load(open(info))
outside = [k for k in ("package", "library", "gangrun", "gang_baby")
           if not (d[k] or "").startswith(root)]
versions = {d["version"], d["extension_built_with"]}
if "--pip" in sys.argv[5:] or d["installed_by_pip"] is not None:
    versions.add(d["installed_by_pip"])
if outside or versions != {version}:
    sys.exit(f"gang.info, {what}: {d}\n(outside {root}: {outside}; "
             f"versions {sorted(map(str, versions))}, want {version})")
print(f"{what}: gang {version}, libgang {d['library']}, "
      f"torch backend {d['torch_backend']}")
