#include "harness/owned_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "api/device_runtime.h"
#include "cpu/parallel.h"
#include "common/host_dtype.h"
#include "flashgate/error.h"

#ifdef FLASHGATE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace flashgate::harness {

uint64_t fresh_seed() {
  if (const char* s = std::getenv("FLASHGATE_SEED")) return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

Buffer::Buffer(Device device, size_t bytes) : bytes_(bytes), device_(device) {
  const size_t n = bytes ? bytes : 1;
  if (device == Device::cpu) {
    ptr_ = std::shared_ptr<void>(std::malloc(n), std::free);
    if (!ptr_) throw std::bad_alloc();
    return;
  }
#ifdef FLASHGATE_WITH_CUDA
  void* p = nullptr;
  // The size in the message: a problem too large for the GPU says what it asked for.
  detail::check_cuda(cudaMalloc(&p, n), ("cudaMalloc of " + std::to_string(n) + " bytes").c_str());
  ptr_ = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
#else
  throw Error(ErrorKind::unsupported, "device", "flashgate: this build has no CUDA");
#endif
}

namespace {

// Bytes spanned by a view from its data pointer (the last element's end).
size_t span_bytes(const Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t last = 0;
  for (int a = 0; a < t.rank; ++a) last += (t.shape[a] - 1) * t.stride[a];
  return static_cast<size_t>(last + 1) * dtype_size(t.dtype);
}

// Calls f(logical_index, element_offset) for the elements [begin, end) in logical (row-major) order.
template <class F>
void for_each_element_in(const Tensor& t, int64_t begin, int64_t end, F&& f) {
  if (begin >= end) return;
  int64_t idx[kMaxRank] = {0, 0, 0, 0};
  for (int64_t a = t.rank - 1, rest = begin; a >= 0; --a) {  // begin's multi-index
    idx[a] = rest % t.shape[a];
    rest /= t.shape[a];
  }
  for (int64_t e = begin; e < end; ++e) {
    int64_t off = 0;
    for (int a = 0; a < t.rank; ++a) off += idx[a] * t.stride[a];
    f(e, off);
    for (int a = t.rank - 1; a >= 0; --a) {
      if (++idx[a] < t.shape[a]) break;
      idx[a] = 0;
    }
  }
}

// Element chunks that the CPU worker threads take one at a time (large tensors: 2^31 elements in tests).
constexpr int64_t kFillChunk = int64_t{1} << 20;

// Calls f(chunk, begin, end) for the element chunks of t, in parallel.
template <class F>
void for_each_chunk(const Tensor& t, F&& f) {
  const int64_t n = t.numel();
  cpu::parallel_for((n + kFillChunk - 1) / kFillChunk,
                    [&](int64_t c) { f(c, c * kFillChunk, std::min(n, (c + 1) * kFillChunk)); });
}

// Calls f(logical_index, element_offset) for every element, chunks of them in parallel (f must only touch
// its own element).
template <class F>
void for_each_element(const Tensor& t, F&& f) {
  for_each_chunk(t, [&](int64_t, int64_t begin, int64_t end) { for_each_element_in(t, begin, end, f); });
}

// Random fills, chunk by chunk as above: chunk c draws from its own engine seeded from (one draw of the
// caller's rng, c), so the values depend on the seed alone (not on the thread count) and go straight into
// the tensor. (One engine and a numel-sized staging vector took ~1 min and 16 GB per 2^31-element tensor.)
template <class Draw>
void fill_random(const Tensor& t, Rng& rng, Draw draw) {
  if (t.device != Device::cpu) throw Error(ErrorKind::invalid_argument, "tensor", "harness: fills need a host tensor");
  const uint64_t base = rng();
  for_each_chunk(t, [&](int64_t c, int64_t begin, int64_t end) {
    Rng engine = chunk_engine(base, c);
    auto next = draw();  // a fresh distribution per chunk
    for_each_element_in(t, begin, end, [&](int64_t, int64_t off) { host::store(t.data, t.dtype, off, next(engine)); });
  });
}

void memcpy_any(void* dst, Device dd, const void* src, Device sd, size_t bytes) {
  if (bytes == 0) return;
  if (dd == Device::cpu && sd == Device::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef FLASHGATE_WITH_CUDA
  detail::check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
#else
  throw Error(ErrorKind::unsupported, "device", "flashgate: this build has no CUDA");
#endif
}

}  // namespace

OwnedTensor::OwnedTensor(DType dtype, std::vector<int64_t> shape, Device device, int64_t row_pad) {
  view_.dtype = dtype;
  view_.device = device;
  view_.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int a = view_.rank - 1; a >= 0; --a) {
    view_.shape[a] = shape[a];
    view_.stride[a] = stride;
    stride *= shape[a] + (a == view_.rank - 1 ? row_pad : 0);
  }
  buffer_ = Buffer(device, static_cast<size_t>(stride) * dtype_size(dtype));
  view_.data = buffer_.data();
}

void OwnedTensor::fill_normal(Rng& rng, double mean, double stddev) {
  fill_random(view_, rng, [&] {
    return [d = std::normal_distribution<double>(mean, stddev)](Rng& e) mutable { return d(e); };
  });
}

void OwnedTensor::fill_uniform(Rng& rng, double lo, double hi) {
  fill_random(view_, rng, [&] {
    return [d = std::uniform_real_distribution<double>(lo, hi)](Rng& e) mutable { return d(e); };
  });
}

void OwnedTensor::fill_log_sigmoid_normal(Rng& rng) {
  fill_random(view_, rng, [] {
    return [d = std::normal_distribution<double>(0.0, 1.0)](Rng& e) mutable {
      return -std::log1p(std::exp(-d(e)));  // log(sigmoid(z))
    };
  });
}

void OwnedTensor::fill(double value) { set_values(std::vector<double>(static_cast<size_t>(numel()), value)); }

void OwnedTensor::fill_index(const std::vector<int64_t>& values) {
  std::vector<double> v(values.begin(), values.end());
  set_values(v);
}

void OwnedTensor::poison() {
  if (buffer_.bytes() == 0) return;
  // 0xFF bytes are NaN in every float format here (fp8 e4m3 S.1111.111 too) and -1 in integers; int8 (o's
  // residual codes, -127..127) takes -128 instead, a code no kernel writes.
  const int byte = view_.dtype == DType::i8 ? 0x80 : 0xff;
  if (view_.device == Device::cpu) {
    std::memset(buffer_.data(), byte, buffer_.bytes());
    return;
  }
#ifdef FLASHGATE_WITH_CUDA
  detail::check_cuda(cudaMemset(buffer_.data(), byte, buffer_.bytes()), "cudaMemset");
#endif
}

OwnedTensor OwnedTensor::to(Device device) const {
  OwnedTensor out = *this;
  out.buffer_ = Buffer(device, buffer_.bytes());
  out.view_.data = out.buffer_.data();
  out.view_.device = device;
  memcpy_any(out.buffer_.data(), device, buffer_.data(), view_.device, buffer_.bytes());
  return out;
}

std::vector<double> OwnedTensor::values() const {
  std::vector<unsigned char> bytes = raw_bytes();
  std::vector<double> out(static_cast<size_t>(numel()));
  for_each_element(view_, [&](int64_t e, int64_t off) { out[e] = host::load(bytes.data(), view_.dtype, off); });
  return out;
}

void OwnedTensor::set_values(const std::vector<double>& values) {
  if (view_.device != Device::cpu)
    throw Error(ErrorKind::invalid_argument, "tensor", "harness: set_values needs a host tensor");
  for_each_element(view_, [&](int64_t e, int64_t off) { host::store(view_.data, view_.dtype, off, values[e]); });
}

std::vector<unsigned char> OwnedTensor::raw_bytes() const {
  std::vector<unsigned char> bytes(buffer_.bytes());
  memcpy_any(bytes.data(), Device::cpu, buffer_.data(), view_.device, bytes.size());
  return bytes;
}

void copy(const OwnedTensor& src, OwnedTensor& dst) {
  memcpy_any(dst.view().data, dst.view().device, src.view().data, src.view().device, span_bytes(src.view()));
}

void device_synchronize() {
#ifdef FLASHGATE_WITH_CUDA
  detail::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#endif
}

std::string gpu_description() {
#ifdef FLASHGATE_WITH_CUDA
  if (!detail::cuda_device_present()) return "";
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) return "";
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs)";
#else
  return "";
#endif
}

}  // namespace flashgate::harness
