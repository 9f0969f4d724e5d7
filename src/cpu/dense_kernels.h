// The one matrix primitive of the reference: every product in the four ops (q.k, p.v, do.v, ds.k, ds^T.q,
// p^T.do) is a small dense multiply-add on blocks already in fp64.
#pragma once

#include <cstdint>

namespace flashgate::cpu {

// C[i][j] += sum over t < depth of A(i, t) * B[t][j] for i < rows, j < cols, where
// A(i, t) = a[i * a_row_stride + t * a_col_stride] (so A may be a transposed view), B and C row-major with
// leading dimensions ldb and ldc. Register-tiled; on x86-64 CPUs with AVX2+FMA a variant for them is chosen
// at run time (FMA rounds once where mul+add round twice: the last bits may differ between machines, never
// between runs on one machine).
void multiply_add(int64_t rows, int64_t cols, int64_t depth, const double* a, int64_t a_row_stride,
                  int64_t a_col_stride, const double* b, int64_t ldb, double* c, int64_t ldc);

// at[j * rows + i] = a[i * cols + j]: keys and values also stored column-major, for products along keys.
void transpose(const double* a, int64_t rows, int64_t cols, double* at);

}  // namespace flashgate::cpu
