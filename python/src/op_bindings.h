// Registers the four ops and their workspace queries on the extension module.
#pragma once

#include <nanobind/nanobind.h>

namespace flashgate::python {

void bind_ops(nanobind::module_& m);

}  // namespace flashgate::python
