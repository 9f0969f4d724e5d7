// Portable (sm80+) serving kernels: packed decode and paged attention (SPEC §5-§6).
#pragma once

#include <cstddef>
#include <string>

#include "api/problem.h"
#include "flashgate/ops.h"

namespace flashgate::host {

std::string cannot_run(const DecodeArgs&, const detail::DecodeProblem&);
std::string cannot_run(const PagedArgs&, const detail::PagedProblem&);

size_t workspace(const DecodeArgs&, const detail::DecodeProblem&);
size_t workspace(const PagedArgs&, const detail::PagedProblem&);

void run(const DecodeArgs&, const detail::DecodeProblem&, const Launch&);
void run(const PagedArgs&, const detail::PagedProblem&, const Launch&);

}  // namespace flashgate::host
