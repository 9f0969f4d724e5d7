#include "cuda/host/tensor_map.h"

#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

#include "flashgate/error.h"

namespace flashgate::cuda {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static std::once_flag once;
  static EncodeTiled fn = nullptr;
  std::call_once(once, [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(ptr);
    else
      cudaGetLastError();
  });
  return fn;
}

CUtensorMapDataType data_type(ElementType t) {
  switch (t) {
    case ElementType::f16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case ElementType::bf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case ElementType::e4m3: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    default: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  }
}

}  // namespace

bool tensor_map_aligned(const void* base, ElementType type, const TensorMapShape& shape) {
  const uint64_t esize = static_cast<uint64_t>(element_size(type));
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return false;
  for (int i = 1; i < shape.rank; ++i)
    if ((shape.strides[i] * esize) % 16 != 0) return false;
  return true;
}

CUtensorMap make_tensor_map(const void* base, ElementType type, const TensorMapShape& shape) {
  const EncodeTiled encode = encode_tiled();
  if (!encode) throw Error(ErrorKind::runtime, "backend", "flashgate: the CUDA driver has no cuTensorMapEncodeTiled");
  const uint64_t esize = static_cast<uint64_t>(element_size(type));
  cuuint64_t dims[4], strides[3];
  cuuint32_t box[4], element_strides[4] = {1, 1, 1, 1};
  for (int i = 0; i < shape.rank; ++i) dims[i] = shape.dims[i], box[i] = shape.box[i];
  for (int i = 1; i < shape.rank; ++i) strides[i - 1] = shape.strides[i] * esize;
  CUtensorMap map;
  const CUresult r = encode(&map, data_type(type), static_cast<cuuint32_t>(shape.rank), const_cast<void*>(base), dims,
                            strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error(ErrorKind::runtime, "backend",
                "flashgate: cuTensorMapEncodeTiled failed (error " + std::to_string(static_cast<int>(r)) + ")");
  return map;
}

}  // namespace flashgate::cuda
