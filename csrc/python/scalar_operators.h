// SCALE, ADD_DIAGONAL, AXPBY, LLTM, GRAPH_CONV: the compiled path's answers to the handlers
// of tensortools/types/scalar/operators.py for tensortools.ops.scale, add_diagonal, axpby,
// lltm and graph_conv of ScalarTensors, for scalar_dispatch.cpp.
#pragma once

#include <torch/extension.h>

namespace tensortools::python::scalar {

// The calls answered, each as its Python handler answers it:
// - ops.scale(d, value), ops.add_diagonal(d, value): d a ScalarTensor of class cls whose
//   pair is a plain floating CPU tensor, value a Python bool, int or float (converted to
//   d's dtype as torch.tensor(value, dtype=...) converts it). The kernel on d's pair
//   (scale; structured where the off-diagonal entry stays 0) or on the 2×2 value * I_2
//   (add_diagonal; its first row is the new pair).
// - ops.axpby(d, e, alpha, beta): d and e such ScalarTensors of one N and dtype, alpha and
//   beta finite ints or floats (not bool): the kernel on their pairs.
// - ops.axpby(d, t, alpha, beta) or (t, d, beta, alpha): d float32 or float64 (axpby's CPU
//   dtypes), t a dense tensor of shape (..., N, N) as below: beta * t (the scale kernel)
//   with alpha * value added to its diagonal.
// - ops.lltm(d, weights, bias, old_h, old_cell), and ops.graph_conv(d, x, weight, bias)
//   for d float32 or float64 (graph_conv's CPU dtypes; bias may be None): the handler's
//   calls (the scale_finite kernel for the products with d, ATen's addmm and mm, the
//   LLTM's pointwise kernel lltm_gates_forward), where the weights (lltm) or the matrix d
//   multiplies (graph_conv) are finite.
// Every dense argument is exactly a torch.Tensor, strided, on the CPU, of d's dtype and of
// the shapes the handler takes, requiring no grad where grad mode is on. Only with no
// keyword argument, no forward-mode AD level open, autocast off and no TorchFunctionMode
// active (the Python handler's own calls would meet them). nullptr without an error set
// for every other call and case, and on any error of the kernels: the Python path
// answers, and raises what it raises.
PyObject* operators(PyObject* klass, PyObject* cls, long code, PyObject* args, PyObject* kwargs);

}  // namespace tensortools::python::scalar
