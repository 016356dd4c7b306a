"""Every in-place and out= form of ScalarTensor's structured calls on a ScalarTensor of
N = 10**12, under each policy, with the address space capped at 1 GiB above what the
process holds once loaded: a call that formed anything of N or N² elements would fail.
Prints one JSON line per call (label, policy, outcome), then "done"."""

import json
import resource

from scalar_structured import in_place_forms, outcome, structured_calls

from tensortools import ScalarTensor

N = 10**12

forms = in_place_forms(structured_calls())
with open("/proc/self/status") as status:
    held = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (held + 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))
for form in forms:
    for policy in ("fallback", "strict"):
        with ScalarTensor.using_policy(policy):
            print(json.dumps([form.label, policy, outcome(form, N)]))
print("done")
