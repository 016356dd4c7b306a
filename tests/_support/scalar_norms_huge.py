"""Every order of ScalarTensor's vector norms, in each whole-matrix form, on a
ScalarTensor of N = 10**12 under the "strict" policy (a call without a structured answer
is refused, not run dense), with the address space capped at 1 GiB above what the process
holds once loaded: a call that formed anything of N or N² elements would fail. Prints one
JSON line per call (label, order, dtype, the answer or the error's type), then "done"."""

import json
import math
import resource

import torch

from tensortools import ScalarTensor

N = 10**12
ORDERS = [0, 0.5, 1, 1.5, 2, 3, 3.5, math.inf, -math.inf, -0.5, -1, -2, -3.5]
FORMS = {
    "vector_norm": lambda d, p: torch.linalg.vector_norm(d, p),
    "vector_norm dims": lambda d, p: torch.linalg.vector_norm(d, ord=p, dim=(0, 1)),
    "vector_norm keepdim": lambda d, p: torch.linalg.vector_norm(d, p, (0, 1), True),
    "vector_norm dtype": lambda d, p: torch.linalg.vector_norm(
        d, p, dtype=torch.complex128 if d.dtype.is_complex else torch.float64
    ),
    "norm": lambda d, p: torch.norm(d, p=p),
    "Tensor.norm": lambda d, p: d.norm(p),
    "norm dims": lambda d, p: torch.norm(d, p, dim=(1, 0), keepdim=True),
}
VALUES = {torch.float32: -0.75, torch.float64: 3.25, torch.complex64: 3 - 4j}

with open("/proc/self/status") as status:
    held = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize"))
resource.setrlimit(resource.RLIMIT_AS, (held + 2**30, resource.getrlimit(resource.RLIMIT_AS)[1]))
with ScalarTensor.using_policy("strict"):
    for dtype, value in VALUES.items():
        d = ScalarTensor(N, value, dtype=dtype)
        for label, form in FORMS.items():
            for p in ORDERS:
                try:
                    got = form(d, p)
                    answer = [str(got.dtype), list(got.shape), got.item()]
                except Exception as err:  # noqa: BLE001 - reported, and the test fails
                    answer = type(err).__name__
                print(json.dumps([label, p, str(dtype), answer]))
print("done")
