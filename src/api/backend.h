// The interface every backend implements, and where dispatch finds them.
#pragma once

#include <cstddef>
#include <string>

#include "api/problem.h"
#include "flashgate/ops.h"

namespace flashgate::detail {

// One backend's entry points. `cannot_run` returns "" when the backend serves the request, else a
// sentence saying why not (used for fallback under `auto` and in the error of a forced backend).
// `run` receives a Launch whose workspace holds at least `workspace(...)` bytes.
class BackendImpl {
 public:
  static constexpr const char* kSlicesElsewhere = "the slice ops run on the cpu and cuda backends";

  virtual ~BackendImpl() = default;
  virtual Backend id() const = 0;

  virtual std::string cannot_run(const ForwardArgs&, const AttentionProblem&) const = 0;
  virtual std::string cannot_run(const BackwardArgs&, const AttentionProblem&) const = 0;
  virtual std::string cannot_run(const DecodeArgs&, const DecodeProblem&) const = 0;
  virtual std::string cannot_run(const PagedArgs&, const PagedProblem&) const = 0;

  virtual size_t workspace(const ForwardArgs&, const AttentionProblem&) const { return 0; }
  virtual size_t workspace(const BackwardArgs&, const AttentionProblem&) const { return 0; }
  virtual size_t workspace(const DecodeArgs&, const DecodeProblem&) const { return 0; }
  virtual size_t workspace(const PagedArgs&, const PagedProblem&) const { return 0; }

  virtual void run(const ForwardArgs&, const AttentionProblem&, const Launch&) const = 0;
  virtual void run(const BackwardArgs&, const AttentionProblem&, const Launch&) const = 0;
  virtual void run(const DecodeArgs&, const DecodeProblem&, const Launch&) const = 0;
  virtual void run(const PagedArgs&, const PagedProblem&, const Launch&) const = 0;

  // The slice ops (context parallelism): the cpu and cuda backends serve them.
  virtual std::string cannot_run(const SliceForwardArgs&, const SliceProblem&) const { return kSlicesElsewhere; }
  virtual std::string cannot_run(const SliceBackwardArgs&, const SliceProblem&) const { return kSlicesElsewhere; }
  virtual size_t workspace(const SliceForwardArgs&, const SliceProblem&) const { return 0; }
  virtual size_t workspace(const SliceBackwardArgs&, const SliceProblem&) const { return 0; }
  virtual void run(const SliceForwardArgs&, const SliceProblem&, const Launch&) const;
  virtual void run(const SliceBackwardArgs&, const SliceProblem&, const Launch&) const;

  // Scratch for callers that pass no workspace (stream-ordered on GPU backends).
  virtual void* allocate_scratch(size_t bytes, CUstream_st* stream) const;
  virtual void free_scratch(void* ptr, CUstream_st* stream) const;
};

const BackendImpl& cpu_backend();
const BackendImpl* cuda_backend();    // nullptr in a build without CUDA
const BackendImpl* hopper_backend();  // nullptr in a build without the Hopper kernels

}  // namespace flashgate::detail
