# An example for `make demo`: reads nothing, writes a report to /out.
import json
import os
import platform

facts = {
    "uid": os.getuid(),
    "cwd": os.getcwd(),
    "python": platform.python_version(),
    "network_interfaces": [l.split(":")[0].strip() for l in open("/proc/self/net/dev").readlines()[2:]],
    "hostname": platform.node(),
}
print("hello from inside the box:", json.dumps(facts))
with open("/out/report.json", "w") as f:
    json.dump(facts, f, indent=2)
print("wrote /out/report.json")
