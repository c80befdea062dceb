/* LN-G (group LayerNorm) forward and backward on contiguous CPU rows, without affine parameters.
 *
 * The input is a C-contiguous array of `rows` rows of `m` numbers (one row = one group of one sample).
 *   forward:  y = (x - mean(x)) * rstd,            rstd = 1 / sqrt(var(x) + eps)   (population variance)
 *   backward: dx = rstd * (g - mean(g) - y * mean(g * y))
 * The backward formula is the vector-Jacobian product of LN on one group, written with the saved output y
 * (checked against F.layer_norm's autograd and finite differences in tests/test_fused_group_norm.py).
 *
 * Why a kernel of its own: ATen's CPU layer_norm pays a fixed cost per row, which dominates when a group
 * has 8 .. 128 numbers. Here each group size of the book (2 .. 128, powers of two) gets a loop whose trip
 * count the compiler knows, so the row is processed in a few vector instructions.
 * Rows are independent: the result does not depend on the number of threads.
 * Compiled at first use by lnbook/core/group_norm_kernel.py; that module's docstring gives the flags.
 */
#include <math.h>
#include <stdint.h>

#define DEFINE_KERNELS(T, SUFFIX, SQRT)                                                                    \
  static inline void fwd_rows_##SUFFIX(const T *restrict x, T *restrict y, T *restrict rstd, int64_t lo,    \
                                       int64_t hi, int64_t m, T eps) {                                      \
    T mu[BLOCK], q[BLOCK];                                                                                  \
    for (int64_t r0 = lo; r0 < hi; r0 += BLOCK) {                                                           \
      int64_t n = hi - r0 < BLOCK ? hi - r0 : BLOCK;                                                        \
      const T *xb = x + r0 * m;                                                                             \
      for (int64_t r = 0; r < n; ++r) {                                                                     \
        T s = 0;                                                                                            \
        for (int64_t j = 0; j < m; ++j) s += xb[r * m + j];                                                 \
        mu[r] = s / (T)m;                                                                                   \
      }                                                                                                     \
      for (int64_t r = 0; r < n; ++r) {                                                                     \
        T acc = 0;                                                                                          \
        for (int64_t j = 0; j < m; ++j) {                                                                   \
          T c = xb[r * m + j] - mu[r];                                                                      \
          acc += c * c;                                                                                     \
        }                                                                                                   \
        q[r] = acc;                                                                                         \
      }                                                                                                     \
      for (int64_t r = 0; r < n; ++r) q[r] = (T)1 / SQRT(q[r] / (T)m + eps);                                \
      for (int64_t r = 0; r < n; ++r) {                                                                     \
        rstd[r0 + r] = q[r];                                                                                \
        for (int64_t j = 0; j < m; ++j) y[(r0 + r) * m + j] = (xb[r * m + j] - mu[r]) * q[r];               \
      }                                                                                                     \
    }                                                                                                       \
  }                                                                                                         \
  static inline void bwd_rows_##SUFFIX(const T *restrict g, const T *restrict y, const T *restrict rstd,    \
                                       T *restrict dx, int64_t lo, int64_t hi, int64_t m) {                 \
    for (int64_t r = lo; r < hi; ++r) {                                                                     \
      const T *gr = g + r * m, *yr = y + r * m;                                                             \
      T *dr = dx + r * m;                                                                                   \
      T a = 0, b = 0;                                                                                       \
      for (int64_t j = 0; j < m; ++j) {                                                                     \
        a += gr[j];                                                                                         \
        b += gr[j] * yr[j];                                                                                 \
      }                                                                                                     \
      a /= (T)m;                                                                                            \
      b /= (T)m;                                                                                            \
      T rs = rstd[r];                                                                                       \
      for (int64_t j = 0; j < m; ++j) dr[j] = rs * (gr[j] - a - yr[j] * b);                                 \
    }                                                                                                       \
  }                                                                                                         \
  static void fwd_block_##SUFFIX(const T *x, T *y, T *rstd, int64_t lo, int64_t hi, int64_t m, T eps) {     \
    switch (m) {                                                                                            \
      case 2: fwd_rows_##SUFFIX(x, y, rstd, lo, hi, 2, eps); return;                                        \
      case 4: fwd_rows_##SUFFIX(x, y, rstd, lo, hi, 4, eps); return;                                        \
      case 8: fwd_rows_##SUFFIX(x, y, rstd, lo, hi, 8, eps); return;                                        \
      case 16: fwd_rows_##SUFFIX(x, y, rstd, lo, hi, 16, eps); return;                                      \
      case 32: fwd_rows_##SUFFIX(x, y, rstd, lo, hi, 32, eps); return;                                      \
      case 64: fwd_rows_##SUFFIX(x, y, rstd, lo, hi, 64, eps); return;                                      \
      case 128: fwd_rows_##SUFFIX(x, y, rstd, lo, hi, 128, eps); return;                                    \
      default: fwd_rows_##SUFFIX(x, y, rstd, lo, hi, m, eps);                                               \
    }                                                                                                       \
  }                                                                                                         \
  static void bwd_block_##SUFFIX(const T *g, const T *y, const T *rstd, T *dx, int64_t lo, int64_t hi,      \
                                 int64_t m) {                                                               \
    switch (m) {                                                                                            \
      case 2: bwd_rows_##SUFFIX(g, y, rstd, dx, lo, hi, 2); return;                                         \
      case 4: bwd_rows_##SUFFIX(g, y, rstd, dx, lo, hi, 4); return;                                         \
      case 8: bwd_rows_##SUFFIX(g, y, rstd, dx, lo, hi, 8); return;                                         \
      case 16: bwd_rows_##SUFFIX(g, y, rstd, dx, lo, hi, 16); return;                                       \
      case 32: bwd_rows_##SUFFIX(g, y, rstd, dx, lo, hi, 32); return;                                       \
      case 64: bwd_rows_##SUFFIX(g, y, rstd, dx, lo, hi, 64); return;                                       \
      case 128: bwd_rows_##SUFFIX(g, y, rstd, dx, lo, hi, 128); return;                                     \
      default: bwd_rows_##SUFFIX(g, y, rstd, dx, lo, hi, m);                                                \
    }                                                                                                       \
  }                                                                                                         \
  void lng_forward_##SUFFIX(const T *x, T *y, T *rstd, int64_t rows, int64_t m, double eps, int threads) {  \
    int64_t chunks = CHUNKS(rows, m, threads);                                                              \
    PARALLEL_FOR                                                                                            \
    for (int64_t c = 0; c < chunks; ++c)                                                                    \
      fwd_block_##SUFFIX(x, y, rstd, c * rows / chunks, (c + 1) * rows / chunks, m, (T)eps);                \
  }                                                                                                         \
  void lng_backward_##SUFFIX(const T *g, const T *y, const T *rstd, T *dx, int64_t rows, int64_t m,         \
                             int threads) {                                                                 \
    int64_t chunks = CHUNKS(rows, m, threads);                                                              \
    PARALLEL_FOR                                                                                            \
    for (int64_t c = 0; c < chunks; ++c)                                                                    \
      bwd_block_##SUFFIX(g, y, rstd, dx, c * rows / chunks, (c + 1) * rows / chunks, m);                    \
  }

/* One chunk per thread, but never fewer than 32768 numbers per chunk (ATen's grain size):
 * below that, starting threads costs more than it saves. */
#define GRAIN 32768
/* The forward pass takes rows in blocks of BLOCK, so that the square roots of a block run as one vector
 * loop (one square root per row was the bottleneck for groups of 8 and 16 numbers). */
#define BLOCK 64
#define CHUNKS(rows, m, threads) \
  ((threads) <= 1 || (rows) * (m) < 2 * GRAIN ? 1 : ((rows) * (m) / GRAIN < (threads) ? (rows) * (m) / GRAIN : (threads)))
#ifdef _OPENMP
#define PARALLEL_FOR _Pragma("omp parallel for if (chunks > 1) num_threads((int)chunks) schedule(static)")
#else
#define PARALLEL_FOR
#endif

DEFINE_KERNELS(float, f32, sqrtf)
DEFINE_KERNELS(double, f64, sqrt)

int lng_has_openmp(void) {
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}
