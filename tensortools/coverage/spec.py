"""What each type registers for the coverage report and the testing kit, in one object:
how to make an instance of a plain tensor, how its results are judged, what its outcomes
mean (:class:`TypeSpec`, :func:`register`, :func:`spec_for`; ``CoverageSpec`` is its
old name).

The names are defined in ``tensortools._spec``, a leaf the types import without importing
the tools; this module is where users find them."""

from tensortools._spec import (
    CoverageSpec,
    TypeSpec,
    register,
    results_of_the_type,
    spec_for,
    wrap_every_tensor,
)

__all__ = [  # (the same names, in _spec's order)
    "CoverageSpec",
    "TypeSpec",
    "register",
    "spec_for",
    "wrap_every_tensor",
    "results_of_the_type",
]
