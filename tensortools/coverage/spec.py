"""What each type registers for the coverage report and the testing kit: how it stands in
for an operator sample, how its results are judged, what its outcomes mean
(:class:`CoverageSpec`, :func:`register`, :func:`spec_for`).

The names are defined in ``tensortools._spec``, a leaf the types import without importing
the tools; this module is where users find them."""

from tensortools._spec import (
    CoverageSpec,
    register,
    results_of_the_type,
    spec_for,
    wrap_every_tensor,
)

__all__ = ["CoverageSpec", "register", "spec_for", "wrap_every_tensor", "results_of_the_type"]
