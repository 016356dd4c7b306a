// ADD, SUB, MUL, DIV, MATMUL: the compiled path's answers to arithmetic.py's calls of two
// operands (tensortools/types/scalar/arithmetic.py), for scalar_dispatch.cpp.
#pragma once

#include <torch/extension.h>

namespace tensortools::python::scalar {

// The torch functions the arithmetic handlers call (torch.add, sub, mul, div), by code.
extern PyObject* g_arithmetic[4];

// The handlers of arithmetic.py for the calls of two CPU operands it answers with a
// structured result: add, sub and mul of two ScalarTensors of one N (the torch function on
// their probes), mul of a ScalarTensor and a number in either order and div of a
// ScalarTensor of N > 0 by a number (on its probe, in the call's order), matmul/mm of two
// finite ScalarTensors of one N and one dtype (not bool) whose product is finite (the
// product of their pairs). nullptr without an error set for every other call and case
// (sizes that differ, 0-d tensors, dense operands, an error of torch's): the Python path
// answers, and raises what it raises.
PyObject* arithmetic(PyObject* klass, PyObject* cls, long code, PyObject* args, PyObject* kwargs);

}  // namespace tensortools::python::scalar
