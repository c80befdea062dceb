/* LN-G (group LayerNorm) forward and backward on contiguous CPU rows, with an optional per-feature affine map.
 *
 * The input is a C-contiguous array of `rows` rows of `m` numbers; one row is one group of one sample, and
 * `G` consecutive rows make one sample of width d = G m (feature of row r, entry j: (r % G) m + j).
 *   forward:  xhat = (x - mean) * rstd,  rstd = 1 / sqrt(var + eps) (population variance),
 *             y = xhat * w + b           (w, b of length d; NULL means w = 1, b = 0)
 *   backward: gw = g * w,  dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
 *             dw[f] = sum over samples of g * xhat,  db[f] = sum over samples of g
 * The backward formula is the vector-Jacobian product of LN on one group (checked against F.layer_norm's
 * autograd and finite differences in tests/core/test_group_norm_kernel.py). The forward pass saves mean and
 * rstd per row; the backward pass recomputes xhat from them.
 *
 * Why a kernel of its own: ATen's CPU layer_norm pays a fixed cost per row, which dominates when a group
 * has 8 .. 128 numbers. Here each group size of the book (2 .. 128, powers of two) gets a loop whose trip
 * count the compiler knows, so the row is processed in a few vector instructions.
 * Rows are independent and every parameter-gradient sum runs over the samples in order: the result does
 * not depend on the number of threads. Compiled at first use by lnbook/core/group_norm_kernel.py; that
 * module's docstring gives the flags.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* One chunk per thread, but never fewer than 32768 numbers per chunk (ATen's grain size). */
#define GRAIN 32768
/* The forward pass takes rows in blocks of BLOCK, so that the square roots of a block run as one vector loop. */
#define BLOCK 64
#define CHUNKS(rows, m, threads) \
  ((threads) <= 1 || (rows) * (m) < 2 * GRAIN ? 1 : ((rows) * (m) / GRAIN < (threads) ? (rows) * (m) / GRAIN : (threads)))
#ifdef _OPENMP
#define PARALLEL_FOR _Pragma("omp parallel for if (chunks > 1) num_threads((int)chunks) schedule(static)")
#else
#define PARALLEL_FOR
#endif

#define SWITCH_M(CALL_M, m)   \
  switch (m) {                \
    case 2: CALL_M(2); break;     \
    case 4: CALL_M(4); break;     \
    case 8: CALL_M(8); break;     \
    case 16: CALL_M(16); break;   \
    case 32: CALL_M(32); break;   \
    case 64: CALL_M(64); break;   \
    case 128: CALL_M(128); break; \
    default: CALL_M(m);       \
  }

#define DEFINE_KERNELS(T, SUFFIX, SQRT)                                                                    \
  static inline void fwd_rows_##SUFFIX(const T *restrict x, T *restrict y, T *restrict mean,                \
                                       T *restrict rstd, const T *restrict w, const T *restrict b,          \
                                       int64_t lo, int64_t hi, int64_t m, int64_t G, T eps) {               \
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
        mean[r0 + r] = mu[r];                                                                               \
        rstd[r0 + r] = q[r];                                                                                \
        T *yr = y + (r0 + r) * m;                                                                           \
        const T *xr = xb + r * m;                                                                           \
        if (w == NULL && b == NULL) {                                                                       \
          for (int64_t j = 0; j < m; ++j) yr[j] = (xr[j] - mu[r]) * q[r];                                   \
        } else {                                                                                            \
          int64_t f0 = ((r0 + r) % G) * m;                                                                  \
          const T *wr = w ? w + f0 : NULL, *br = b ? b + f0 : NULL;                                         \
          if (wr && br) {                                                                                   \
            for (int64_t j = 0; j < m; ++j) yr[j] = (xr[j] - mu[r]) * q[r] * wr[j] + br[j];                 \
          } else if (wr) {                                                                                  \
            for (int64_t j = 0; j < m; ++j) yr[j] = (xr[j] - mu[r]) * q[r] * wr[j];                         \
          } else {                                                                                          \
            for (int64_t j = 0; j < m; ++j) yr[j] = (xr[j] - mu[r]) * q[r] + br[j];                         \
          }                                                                                                 \
        }                                                                                                   \
      }                                                                                                     \
    }                                                                                                       \
  }                                                                                                         \
  static inline void bwd_rows_##SUFFIX(const T *restrict g, const T *restrict x, const T *restrict mean,    \
                                       const T *restrict rstd, const T *restrict w, T *restrict dx,         \
                                       int64_t lo, int64_t hi, int64_t m, int64_t G) {                      \
    for (int64_t r = lo; r < hi; ++r) {                                                                     \
      const T *gr = g + r * m, *xr = x + r * m;                                                             \
      T *dr = dx + r * m;                                                                                   \
      T mu = mean[r], rs = rstd[r];                                                                         \
      T a = 0, c = 0;                                                                                       \
      if (w == NULL) {                                                                                      \
        for (int64_t j = 0; j < m; ++j) {                                                                   \
          a += gr[j];                                                                                       \
          c += gr[j] * (xr[j] - mu);                                                                        \
        }                                                                                                   \
        a /= (T)m;                                                                                          \
        c = c * rs / (T)m;                                                                                  \
        for (int64_t j = 0; j < m; ++j) dr[j] = rs * (gr[j] - a - (xr[j] - mu) * rs * c);                   \
      } else {                                                                                              \
        const T *wr = w + (r % G) * m;                                                                      \
        for (int64_t j = 0; j < m; ++j) {                                                                   \
          a += gr[j] * wr[j];                                                                               \
          c += gr[j] * wr[j] * (xr[j] - mu);                                                                \
        }                                                                                                   \
        a /= (T)m;                                                                                          \
        c = c * rs / (T)m;                                                                                  \
        for (int64_t j = 0; j < m; ++j) dr[j] = rs * (gr[j] * wr[j] - a - (xr[j] - mu) * rs * c);           \
      }                                                                                                     \
    }                                                                                                       \
  }                                                                                                         \
  void lng_forward_##SUFFIX(const T *x, T *y, T *mean, T *rstd, const T *w, const T *b, int64_t rows,       \
                            int64_t m, int64_t G, double eps, int threads) {                                \
    int64_t chunks = CHUNKS(rows, m, threads);                                                              \
    PARALLEL_FOR                                                                                            \
    for (int64_t c = 0; c < chunks; ++c) {                                                                  \
      int64_t lo = c * rows / chunks, hi = (c + 1) * rows / chunks;                                         \
      SWITCH_M(FWD_M_##SUFFIX, m)                                                                           \
    }                                                                                                       \
  }                                                                                                         \
  void lng_backward_##SUFFIX(const T *g, const T *x, const T *mean, const T *rstd, const T *w, T *dx,       \
                             int64_t rows, int64_t m, int64_t G, int threads) {                             \
    int64_t chunks = CHUNKS(rows, m, threads);                                                              \
    PARALLEL_FOR                                                                                            \
    for (int64_t c = 0; c < chunks; ++c) {                                                                  \
      int64_t lo = c * rows / chunks, hi = (c + 1) * rows / chunks;                                         \
      SWITCH_M(BWD_M_##SUFFIX, m)                                                                           \
    }                                                                                                       \
  }                                                                                                         \
  /* dw, db (length d = G m; either may be NULL): sums over the `samples` rows of width d, in order. Each    \
   * thread owns a range of features; per sample the group statistics are first spread over the features   \
   * (mu_f, rs_f), so that the accumulation is one vector loop over the range whatever the group size. */  \
  void lng_param_grads_##SUFFIX(const T *g, const T *x, const T *mean, const T *rstd, T *dw, T *db,         \
                                int64_t samples, int64_t m, int64_t G, int threads) {                       \
    int64_t d = m * G;                                                                                      \
    int64_t chunks = CHUNKS(G, samples * m, threads);                                                       \
    PARALLEL_FOR                                                                                            \
    for (int64_t c = 0; c < chunks; ++c) {                                                                  \
      int64_t glo = c * G / chunks, ghi = (c + 1) * G / chunks;                                             \
      int64_t flo = glo * m, n = (ghi - glo) * m;                                                           \
      T *mu_f = (T *)malloc(2 * (size_t)n * sizeof(T)), *rs_f = mu_f + n;                                   \
      T *restrict dwc = dw ? dw + flo : NULL, *restrict dbc = db ? db + flo : NULL;                         \
      for (int64_t f = 0; f < n; ++f) {                                                                     \
        if (dwc) dwc[f] = 0;                                                                                \
        if (dbc) dbc[f] = 0;                                                                                \
      }                                                                                                     \
      for (int64_t s = 0; s < samples; ++s) {                                                               \
        const T *restrict gs = g + s * d + flo, *restrict xs = x + s * d + flo;                             \
        if (dbc)                                                                                            \
          for (int64_t f = 0; f < n; ++f) dbc[f] += gs[f];                                                  \
        if (!dwc) continue;                                                                                 \
        for (int64_t grp = glo; grp < ghi; ++grp) {                                                         \
          T mu = mean[s * G + grp], rs = rstd[s * G + grp];                                                 \
          for (int64_t j = 0; j < m; ++j) {                                                                 \
            mu_f[(grp - glo) * m + j] = mu;                                                                 \
            rs_f[(grp - glo) * m + j] = rs;                                                                 \
          }                                                                                                 \
        }                                                                                                   \
        for (int64_t f = 0; f < n; ++f) dwc[f] += gs[f] * (xs[f] - mu_f[f]) * rs_f[f];                      \
      }                                                                                                     \
      free(mu_f);                                                                                           \
    }                                                                                                       \
  }

#define FWD_M_f32(M) fwd_rows_f32(x, y, mean, rstd, w, b, lo, hi, M, G, (float)eps)
#define BWD_M_f32(M) bwd_rows_f32(g, x, mean, rstd, w, dx, lo, hi, M, G)
#define FWD_M_f64(M) fwd_rows_f64(x, y, mean, rstd, w, b, lo, hi, M, G, (double)eps)
#define BWD_M_f64(M) bwd_rows_f64(g, x, mean, rstd, w, dx, lo, hi, M, G)

DEFINE_KERNELS(float, f32, sqrtf)
DEFINE_KERNELS(double, f64, sqrt)

int lng_has_openmp(void) {
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}
