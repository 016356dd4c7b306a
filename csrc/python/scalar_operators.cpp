// The compiled path's answers to tensortools.ops of ScalarTensors (scalar_operators.h).
#include "scalar_operators.h"

#include <ATen/ATen.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cmath>
#include <cstdint>
#include <exception>

#include "scalar_rules.h"
#include "scalar_values.h"

namespace tensortools::python::scalar {
namespace {

using Unary = at::Tensor(const at::Tensor&, const at::Tensor&);
using Pair = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&);
using Gates = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&);
using Axpby = at::Tensor(const at::Tensor&, const at::Tensor&, const c10::Scalar&,
                         const c10::Scalar&);

// The registered operators, called below autograd as the entry points' lean path calls
// them (tensortools/ops/_autograd.py): a pair never requires grad.
template <typename Signature>
c10::TypedOperatorHandle<Signature> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

// The pair of a ScalarTensor of class cls whose pair the kernels here take (a plain 1-D
// CPU tensor of 2 entries of a floating dtype), and its N, as new references; false (no
// error set) for anything else.
bool floating_operand(PyObject* x, PyObject* cls, PyObject** n, PyObject** pair) {
  if (Py_TYPE(x) != reinterpret_cast<PyTypeObject*>(cls)) return false;
  *n = PyObject_GetAttr(x, s_n);
  *pair = *n == nullptr ? nullptr : PyObject_GetAttr(x, s_pair);
  bool ok = *pair != nullptr && PyLong_CheckExact(*n) && THPVariable_CheckExact(*pair);
  if (ok) {
    const at::Tensor& t = THPVariable_Unpack(*pair);
    ok = t.device().is_cpu() && t.layout() == at::kStrided && t.dim() == 1 && t.numel() == 2 &&
         at::isFloatingType(t.scalar_type()) && !t.is_conj() && !t.is_neg();
  }
  if (!ok) {
    PyErr_Clear();
    Py_CLEAR(*n);
    Py_CLEAR(*pair);
  }
  return ok;
}

// A Python bool, int or float as a double (an int as Python's float() rounds it); false
// (no error set) for anything else and for an int beyond a double's range.
bool as_double(PyObject* x, bool allow_bool, double* out) {
  if (PyFloat_CheckExact(x)) {
    *out = PyFloat_AS_DOUBLE(x);
    return true;
  }
  if (PyLong_CheckExact(x) || (allow_bool && PyBool_Check(x))) {
    *out = PyLong_AsDouble(x);
    if (*out == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    return true;
  }
  return false;
}

// value as a 0-d tensor of like's dtype on the CPU, converted as torch.tensor(value,
// dtype=like.dtype) converts a Python number (through a double: to inf beyond the range).
at::Tensor value_tensor(double value, const at::Tensor& like) {
  at::Tensor t = at::empty({}, like.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, t.scalar_type(), "scalar_operators",
      [&] { *t.mutable_data_ptr<scalar_t>() = static_cast<scalar_t>(value); });
  return t;
}

// Whether entry 1 of a CPU pair (the off-diagonal entry) is 0 (either sign).
bool off_diagonal_zero(const at::Tensor& pair) {
  std::complex<double> v;
  int64_t integer = 0;
  return entry(pair, 1, &v, &integer) && v == std::complex<double>(0.0, 0.0);
}

// A new instance of klass of size n for the pair; nullptr without an error set on failure.
PyObject* structured(PyObject* klass, PyObject* n, at::Tensor pair) {
  PyObject* wrapped = THPVariable_Wrap(std::move(pair));
  PyObject* out = wrapped == nullptr ? nullptr : make(klass, n, wrapped);
  Py_XDECREF(wrapped);
  if (out == nullptr) PyErr_Clear();
  return out;
}

PyObject* scale_or_add_diagonal(PyObject* klass, PyObject* n, const at::Tensor& pair, long code,
                                PyObject* value_object) {
  double value = 0.0;
  if (!as_double(value_object, /*allow_bool=*/true, &value)) return nullptr;
  const at::Tensor v = value_tensor(value, pair);
  at::AutoDispatchBelowAutograd below;
  if (code == kScale) {
    static const auto scale = op<Unary>("tensortools::scale");
    at::Tensor result = scale.call(pair, v);
    // (0 * inf or 0 * nan off the diagonal: the dense call answers)
    return off_diagonal_zero(result) ? structured(klass, n, std::move(result)) : nullptr;
  }
  static const auto add_diagonal = op<Unary>("tensortools::add_diagonal");
  // value * I_2 with the signed zeros of the pair, as small_matrix(d, 2) makes it
  const at::Tensor small = at::stack({pair, pair.flip(0)});
  return structured(klass, n, add_diagonal.call(small, v).select(0, 0));
}

// Python's torch.autograd.forward_ad module (its _current_level: a dual level is open).
PyObject* g_forward_ad = nullptr;

// A dense argument the answers below take: exactly a torch.Tensor, strided, of dtype and
// on the CPU, asking nothing of autograd (no gradient wanted of it; see operators()).
const at::Tensor* plain_argument(PyObject* x, at::ScalarType dtype) {
  if (!THPVariable_CheckExact(x)) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(x);
  const bool plain = t.layout() == at::kStrided && t.device().is_cpu() &&
                     t.scalar_type() == dtype && !(t.requires_grad() && at::GradMode::is_enabled());
  return plain ? &t : nullptr;
}

// Whether graph_conv's and axpby's CPU kernels take the dtype of a pair (float32, float64:
// kCpuFloatingTypes); a handler computing with other kernels must not answer a call the
// dense one refuses.
bool cpu_kernel_dtype(const at::Tensor& pair) {
  return pair.scalar_type() == at::kFloat || pair.scalar_type() == at::kDouble;
}

// value * m as diagonal_product(d, m) gives it where m is finite (the scale_finite kernel);
// undefined where it is not (the Python handler's NaN rule then answers).
at::Tensor finite_product(const at::Tensor& m, const at::Tensor& pair) {
  static const auto scale_finite = op<Pair>("tensortools::scale_finite");
  auto [out, all_finite] = scale_finite.call(m, pair.select(0, 0));
  return all_finite.item<bool>() ? out : at::Tensor();
}

PyObject* wrap_all(std::initializer_list<at::Tensor> tensors) {
  PyObject* out = PyTuple_New(static_cast<Py_ssize_t>(tensors.size()));
  Py_ssize_t i = 0;
  for (const at::Tensor& t : tensors) {
    PyObject* wrapped = out == nullptr ? nullptr : THPVariable_Wrap(t);
    if (wrapped == nullptr) {
      Py_XDECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, i++, wrapped);
  }
  return out;
}

// ops.lltm(d, weights, bias, old_h, old_cell): the Python handler's gates, the input's part
// a scaled slice of the weights, then the pointwise kernel.
PyObject* lltm(PyObject* args, int64_t n, const at::Tensor& pair) {
  const at::Tensor* t[4];
  for (int i = 0; i < 4; ++i) {
    t[i] = plain_argument(PyTuple_GET_ITEM(args, i + 1), pair.scalar_type());
    if (t[i] == nullptr) return nullptr;
  }
  const at::Tensor &weights = *t[0], &bias = *t[1], &old_h = *t[2], &old_cell = *t[3];
  if (weights.dim() != 2 || bias.dim() != 1 || old_h.dim() != 2 || old_cell.dim() != 2) {
    return nullptr;
  }
  const int64_t s = weights.size(0) / 3;
  if (weights.size(0) != 3 * s || weights.size(1) != s + n || bias.size(0) != 3 * s ||
      old_h.sizes() != old_cell.sizes() || old_h.size(0) != n || old_h.size(1) != s) {
    return nullptr;
  }
  const at::Tensor input_part = finite_product(weights.narrow(1, s, n), pair);
  if (!input_part.defined()) return nullptr;
  // (in place, as the Python handler does here: an out-of-place addmm may order its sums
  // otherwise, and costs more)
  at::Tensor gates = input_part.t() + bias;
  gates.addmm_(old_h, weights.narrow(1, 0, s).t());
  static const auto gates_forward = op<Gates>("tensortools::lltm_gates_forward");
  auto [new_h, new_cell, activated] = gates_forward.call(gates, old_cell);
  return wrap_all({new_h, new_cell});
}

// ops.graph_conv(d, x, weight, bias) with d the adjacency: the Python handler's products,
// in the kernel's order (csrc/ops/graph_conv.cpp), each with d a scaled copy.
PyObject* graph_conv(PyObject* args, int64_t n, const at::Tensor& pair) {
  if (!cpu_kernel_dtype(pair)) return nullptr;
  const at::ScalarType dtype = pair.scalar_type();
  const at::Tensor* x = plain_argument(PyTuple_GET_ITEM(args, 1), dtype);
  const at::Tensor* weight = plain_argument(PyTuple_GET_ITEM(args, 2), dtype);
  PyObject* bias_object = PyTuple_GET_ITEM(args, 3);
  const at::Tensor* bias = bias_object == Py_None ? nullptr : plain_argument(bias_object, dtype);
  if (x == nullptr || weight == nullptr || (bias == nullptr && bias_object != Py_None) ||
      x->dim() != 2 || weight->dim() != 2 || x->size(0) != n || weight->size(0) != x->size(1) ||
      (bias != nullptr && (bias->dim() != 1 || bias->size(0) != weight->size(1)))) {
    return nullptr;
  }
  at::Tensor out;
  if (x->size(1) <= weight->size(1)) {
    const at::Tensor ax = finite_product(*x, pair);
    if (!ax.defined()) return nullptr;
    out = bias != nullptr ? at::addmm(*bias, ax, *weight) : at::mm(ax, *weight);
  } else {
    out = finite_product(at::mm(*x, *weight), pair);
    if (!out.defined()) return nullptr;
    if (bias != nullptr) out = out + *bias;
  }
  return THPVariable_Wrap(std::move(out));
}

// Whether a forward-mode AD level is open (the Python path then runs the call: its
// tangents are the operators' registered route's).
bool dual_level_open() {
  if (g_forward_ad == nullptr) {
    g_forward_ad = PyImport_ImportModule("torch.autograd.forward_ad");
    if (g_forward_ad == nullptr) return true;
  }
  PyObject* level = PyObject_GetAttrString(g_forward_ad, "_current_level");
  const long value = level != nullptr && PyLong_Check(level) ? PyLong_AsLong(level) : 0;
  Py_XDECREF(level);
  return level == nullptr || value != -1;
}

// ops.axpby(d, t, alpha, beta) or ops.axpby(t, d, beta, alpha), t a dense tensor of shape
// (..., N, N): the Python handler's beta * t (the scale kernel), alpha * value added to its
// diagonal in place.
PyObject* axpby_dense(PyObject* t_object, int64_t n, const at::Tensor& pair, double alpha,
                      double beta) {
  const at::Tensor* t = plain_argument(t_object, pair.scalar_type());
  if (t == nullptr || t->dim() < 2 || t->size(-1) != n || t->size(-2) != n) return nullptr;
  static const auto scale = op<Unary>("tensortools::scale");
  at::Tensor out = scale.call(*t, value_tensor(beta, *t));
  out.diagonal(0, -2, -1).add_(at::mul(pair.select(0, 0), alpha));
  return THPVariable_Wrap(std::move(out));
}

// ops.axpby(x, y, alpha, beta) with a ScalarTensor of class cls for x or y: both
// ScalarTensors of one N and dtype, the kernel on their pairs; one, axpby_dense (where no
// dual level is open).
PyObject* axpby(PyObject* klass, PyObject* cls, PyObject* args) {
  double alpha = 0.0, beta = 0.0;
  if (!as_double(PyTuple_GET_ITEM(args, 2), /*allow_bool=*/false, &alpha) ||
      !as_double(PyTuple_GET_ITEM(args, 3), /*allow_bool=*/false, &beta) || !std::isfinite(alpha) ||
      !std::isfinite(beta)) {
    return nullptr;
  }
  PyObject* ns[2] = {nullptr, nullptr};
  PyObject* pairs[2] = {nullptr, nullptr};
  bool scalar[2];
  for (int i = 0; i < 2; ++i) {
    scalar[i] = floating_operand(PyTuple_GET_ITEM(args, i), cls, &ns[i], &pairs[i]);
  }
  PyObject* out = nullptr;
  if (scalar[0] && scalar[1]) {
    const at::Tensor& x = THPVariable_Unpack(pairs[0]);
    const at::Tensor& y = THPVariable_Unpack(pairs[1]);
    if (PyObject_RichCompareBool(ns[0], ns[1], Py_EQ) == 1 &&  // (exact ints: no Python code)
        x.scalar_type() == y.scalar_type()) {
      static const auto kernel = op<Axpby>("tensortools::axpby");
      at::AutoDispatchBelowAutograd below;
      out = structured(klass, ns[0], kernel.call(x, y, alpha, beta));
    }
  } else if ((scalar[0] || scalar[1]) &&
             cpu_kernel_dtype(THPVariable_Unpack(pairs[scalar[0] ? 0 : 1]))) {
    const int d = scalar[0] ? 0 : 1;
    const int64_t size = PyLong_AsLongLong(ns[d]);
    if (size >= 0) {
      at::AutoDispatchBelowAutograd below;
      out = axpby_dense(PyTuple_GET_ITEM(args, 1 - d), size, THPVariable_Unpack(pairs[d]),
                        d == 0 ? alpha : beta, d == 0 ? beta : alpha);
    }
  }
  PyErr_Clear();
  for (int i = 0; i < 2; ++i) {
    Py_XDECREF(ns[i]);
    Py_XDECREF(pairs[i]);
  }
  return out;
}

int arguments_of(long code) {
  switch (code) {
    case kAxpby:
    case kGraphConv:
      return 4;
    case kLltm:
      return 5;
    default:
      return 2;
  }
}

}  // namespace

PyObject* operators(PyObject* klass, PyObject* cls, long code, PyObject* args, PyObject* kwargs) {
  const Py_ssize_t argc = PyTuple_GET_SIZE(args);
  if ((kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) || argc != arguments_of(code) ||
      at::impl::torch_function_mode_enabled() || at::autocast::is_autocast_enabled(at::kCPU)) {
    return nullptr;
  }
  // (a pair or an argument may be a dual tensor: the Python path keeps its tangent)
  if (dual_level_open()) {
    PyErr_Clear();
    return nullptr;
  }
  const bool dense_arguments = code == kLltm || code == kGraphConv;
  if (code == kAxpby) {
    try {
      return axpby(klass, cls, args);
    } catch (const std::exception&) {
      PyErr_Clear();
      return nullptr;  // (the Python path runs the call again, and raises what it raises)
    }
  }
  PyObject* n = nullptr;
  PyObject* pair = nullptr;
  if (!floating_operand(PyTuple_GET_ITEM(args, 0), cls, &n, &pair)) return nullptr;
  PyObject* out = nullptr;
  try {
    if (dense_arguments) {
      const int64_t size = PyLong_AsLongLong(n);  // (an exact int: no Python code runs)
      if (size >= 0) {
        const at::Tensor& p = THPVariable_Unpack(pair);
        at::AutoDispatchBelowAutograd below;
        out = code == kLltm ? lltm(args, size, p) : graph_conv(args, size, p);
      }
    } else {
      out = scale_or_add_diagonal(klass, n, THPVariable_Unpack(pair), code,
                                  PyTuple_GET_ITEM(args, 1));
    }
  } catch (const std::exception&) {
    out = nullptr;  // (the Python path runs the call again, and raises what it raises)
  }
  if (out == nullptr) PyErr_Clear();
  Py_DECREF(n);
  Py_DECREF(pair);
  return out;
}

}  // namespace tensortools::python::scalar
