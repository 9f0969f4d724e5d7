// flashgate._C: the nanobind extension. Ops take DLPack tensors and a CUDA stream (see op_bindings.cpp);
// flashgate::Error becomes ValueError / TypeError / NotImplementedError / RuntimeError with the C++ message.
#include <nanobind/nanobind.h>

#include <exception>

#include "flashgate/error.h"
#include "flashgate/ops.h"
#include "op_bindings.h"

namespace nb = nanobind;

namespace {

PyObject* python_type_of(flashgate::ErrorKind kind) {
  switch (kind) {
    case flashgate::ErrorKind::invalid_argument: return PyExc_ValueError;
    case flashgate::ErrorKind::wrong_type: return PyExc_TypeError;
    case flashgate::ErrorKind::unsupported: return PyExc_NotImplementedError;
    case flashgate::ErrorKind::runtime: return PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

bool built_with_cuda() {
#ifdef FLASHGATE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "flashgate C++ operators over DLPack tensors";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const flashgate::Error& e) {
      PyErr_SetString(python_type_of(e.kind()), e.what());
    }
  });

  flashgate::python::bind_ops(m);

  m.def("cuda_available", &flashgate::cuda_available, "Whether a CUDA device is usable from this process.");
  m.def("built_with_cuda", &built_with_cuda, "Whether this build contains the CUDA backends.");
  m.def("version", &flashgate::version, "The library version.");
}
