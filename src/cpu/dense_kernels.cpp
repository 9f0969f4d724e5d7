#include "cpu/dense_kernels.h"

#include <cstring>

namespace flashgate::cpu {
namespace {

// GCC/Clang vector extensions: one source for SSE2 (two doubles) and AVX2 (four doubles) registers.
typedef double Vec2 __attribute__((vector_size(16)));
typedef double Vec4 __attribute__((vector_size(32)));

// A tile of kTileRows x (2 vectors) of C stays in registers over the whole depth; B's row segment and a
// broadcast of A's element feed it. Edges (fewer rows or columns than a tile) take a plain loop.
constexpr int kTileRows = 6;

template <class Vec>
__attribute__((always_inline)) inline void multiply_add_tiled(int64_t rows, int64_t cols, int64_t depth,
                                                              const double* a, int64_t ars, int64_t acs,
                                                              const double* b, int64_t ldb, double* c,
                                                              int64_t ldc) {
  constexpr int kLanes = sizeof(Vec) / sizeof(double), kTileCols = 2 * kLanes;
  const int64_t tiled_rows = rows - rows % kTileRows, tiled_cols = cols - cols % kTileCols;
  for (int64_t j0 = 0; j0 < tiled_cols; j0 += kTileCols)  // B's column panel stays in cache across row tiles
    for (int64_t i0 = 0; i0 < tiled_rows; i0 += kTileRows) {
      Vec acc0[kTileRows], acc1[kTileRows];
      for (int i = 0; i < kTileRows; ++i) acc0[i] = acc1[i] = Vec{};
      const double* a_col = a + i0 * ars;
      for (int64_t t = 0; t < depth; ++t, a_col += acs) {
        Vec b0, b1;
        std::memcpy(&b0, b + t * ldb + j0, sizeof(Vec));
        std::memcpy(&b1, b + t * ldb + j0 + kLanes, sizeof(Vec));
        for (int i = 0; i < kTileRows; ++i) {
          const double ai = a_col[i * ars];
          acc0[i] += b0 * ai;
          acc1[i] += b1 * ai;
        }
      }
      for (int i = 0; i < kTileRows; ++i) {
        double* ci = c + (i0 + i) * ldc + j0;
        Vec c0, c1;
        std::memcpy(&c0, ci, sizeof(Vec));
        std::memcpy(&c1, ci + kLanes, sizeof(Vec));
        c0 += acc0[i];
        c1 += acc1[i];
        std::memcpy(ci, &c0, sizeof(Vec));
        std::memcpy(ci + kLanes, &c1, sizeof(Vec));
      }
    }
  auto edge = [&](int64_t i_begin, int64_t i_end, int64_t j_begin, int64_t j_end) {
    for (int64_t i = i_begin; i < i_end; ++i)
      for (int64_t t = 0; t < depth; ++t) {
        const double ait = a[i * ars + t * acs];
        const double* bt = b + t * ldb;
        double* ci = c + i * ldc;
        for (int64_t j = j_begin; j < j_end; ++j) ci[j] += ait * bt[j];
      }
  };
  edge(tiled_rows, rows, 0, tiled_cols);
  edge(0, rows, tiled_cols, cols);
}

void multiply_add_portable(int64_t rows, int64_t cols, int64_t depth, const double* a, int64_t ars, int64_t acs,
                           const double* b, int64_t ldb, double* c, int64_t ldc) {
  multiply_add_tiled<Vec2>(rows, cols, depth, a, ars, acs, b, ldb, c, ldc);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define FLASHGATE_CPU_AVX2 1
__attribute__((target("avx2,fma"))) void multiply_add_avx2(int64_t rows, int64_t cols, int64_t depth,
                                                            const double* a, int64_t ars, int64_t acs,
                                                            const double* b, int64_t ldb, double* c, int64_t ldc) {
  multiply_add_tiled<Vec4>(rows, cols, depth, a, ars, acs, b, ldb, c, ldc);
}
#endif

}  // namespace

void multiply_add(int64_t rows, int64_t cols, int64_t depth, const double* a, int64_t a_row_stride,
                  int64_t a_col_stride, const double* b, int64_t ldb, double* c, int64_t ldc) {
  if (rows <= 0 || cols <= 0 || depth <= 0) return;
#ifdef FLASHGATE_CPU_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) return multiply_add_avx2(rows, cols, depth, a, a_row_stride, a_col_stride, b, ldb, c, ldc);
#endif
  multiply_add_portable(rows, cols, depth, a, a_row_stride, a_col_stride, b, ldb, c, ldc);
}

void transpose(const double* a, int64_t rows, int64_t cols, double* at) {
  constexpr int64_t kTile = 8;  // small tiles: the power-of-two strides of the written side alias in L1
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile)
      for (int64_t r = r0; r < rows && r < r0 + kTile; ++r)
        for (int64_t c = c0; c < cols && c < c0 + kTile; ++c) at[c * rows + r] = a[r * cols + c];
}

}  // namespace flashgate::cpu
