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
 * has 8 .. 128 numbers. Here each group size of the book (2 .. 128, powers of two) gets loops whose trip
 * count the compiler knows. Which loop order is fastest depends on m (measured with benchmarks/lng_speed.py
 * and by timing the three entry points alone, one thread): groups of 2 run sample by sample, the loop over
 * groups innermost-but-one so that it is vectorised across groups; groups of 16 run row by row, the
 * statistics and the output of a row in one pass; other sizes in blocks of BLOCK rows (the square roots of
 * a block as one vector loop). The backward pass runs row by row (groups of 2: sample by sample), the
 * parameter gradients group by group (groups of 8: with the statistics first spread over the features).
 * The feature of a row is tracked by a counter, not a division.
 * Rows are independent and every parameter-gradient sum runs over the samples in order: the result does
 * not depend on the number of threads. Compiled at first use by lnbook/core/group_norm_kernel.py; that
 * module's docstring gives the flags.
 */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* One chunk per thread, but never fewer than 32768 numbers per chunk (ATen's grain size). */
#define GRAIN 32768
/* Groups are taken in blocks of at most BLOCK, so that the statistics of a block sit in small local arrays
 * and their square roots run as one vector loop. */
#define BLOCK 64
#define CHUNKS(units, per_unit, threads)                                                                     \
  ((threads) <= 1 || (units) * (per_unit) < 2 * GRAIN                                                        \
       ? 1                                                                                                   \
       : ((units) * (per_unit) / GRAIN < (threads) ? (units) * (per_unit) / GRAIN : (threads)))
#ifdef _OPENMP
#define PARALLEL_FOR _Pragma("omp parallel for if (chunks > 1) num_threads((int)chunks) schedule(static)")
#else
#define PARALLEL_FOR
#endif

/* Every group size of the book gets loops of constant trip count. */
#define SWITCH_M(CALL_M, m)       \
  switch (m) {                    \
    case 2: CALL_M(2); break;     \
    case 4: CALL_M(4); break;     \
    case 8: CALL_M(8); break;     \
    case 16: CALL_M(16); break;   \
    case 32: CALL_M(32); break;   \
    case 64: CALL_M(64); break;   \
    case 128: CALL_M(128); break; \
    default: CALL_M(m);           \
  }

/* The fast path's float sum of squared deviations is exact enough when it lies in [m * MIN / EPS, MAX] of its
 * type; outside (overflow to inf for |x| around 1e19 in float32, underflow of the squares for |x| below about
 * 1e-19, a constant group, NaN) the row's statistics are recomputed by stats_safe: the mean as on the fast
 * path (as a sum of x_j / m if that overflows), the deviations scaled by their largest magnitude before squaring, rstd = 1 / hypot(sd, sqrt(eps)).
 * This is exact to rounding for |x| < MAX / 2 of the type, and gives NaN for NaN or infinite input. */
#define UNSAFE(acc, m, MAXV, MINV, EPSV) (!((acc) <= (MAXV)) || (acc) < (m) * ((MINV) / (EPSV)))
#define DEFINE_KERNELS(T, SUFFIX, SQRT, MAXV, MINV, EPSV)                                                      \
  static void stats_safe_##SUFFIX(const T *xr, int64_t m, T eps, T *mean_out, T *rstd_out) {                  \
    T mu = 0, s = 0, acc = 0;                                                                                 \
    for (int64_t j = 0; j < m; ++j) mu += xr[j];                                                              \
    mu /= (T)m; /* as on the fast path (a constant group stays exactly constant), unless the sum overflowed */ \
    if (!(fabs(mu) <= (MAXV))) {                                                                              \
      mu = 0;                                                                                                 \
      for (int64_t j = 0; j < m; ++j) mu += xr[j] / (T)m;                                                     \
    }                                                                                                         \
    for (int64_t j = 0; j < m; ++j) s = fabs(xr[j] - mu) > s ? (T)fabs(xr[j] - mu) : s;                       \
    if (s > 0 && s <= (MAXV)) {                                                                               \
      for (int64_t j = 0; j < m; ++j) acc += ((xr[j] - mu) / s) * ((xr[j] - mu) / s);                         \
      s = s * SQRT(acc / (T)m);                                                                               \
    } else if (s != 0) {                                                                                      \
      s = (T)NAN; /* NaN or infinite input */                                                                  \
    }                                                                                                         \
    *mean_out = mu;                                                                                           \
    *rstd_out = (T)1 / (T)hypot(s, SQRT(eps));                                                                \
  }                                                                                                           \
  /* rows [lo, hi) in blocks of BLOCK rows: the square roots of a block run as one vector loop */             \
  static inline void fwd_blocks_##SUFFIX(const T *restrict x, T *restrict y, T *restrict mean,                \
                                       T *restrict rstd, const T *restrict w, const T *restrict b,          \
                                       int64_t lo, int64_t hi, int64_t m, int64_t G, T eps) {               \
    T mu[BLOCK], q[BLOCK], ss[BLOCK];                                                                       \
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
      for (int64_t r = 0; r < n; ++r) ss[r] = q[r];                                                         \
      for (int64_t r = 0; r < n; ++r) q[r] = (T)1 / SQRT(q[r] / (T)m + eps);                                \
      for (int64_t r = 0; r < n; ++r)                                                                       \
        if (UNSAFE(ss[r], (T)m, MAXV, MINV, EPSV)) stats_safe_##SUFFIX(xb + r * m, m, eps, mu + r, q + r);    \
      for (int64_t r = 0, k = r0 % G; r < n; ++r, k = k + 1 == G ? 0 : k + 1) {                          \
        mean[r0 + r] = mu[r];                                                                               \
        rstd[r0 + r] = q[r];                                                                                \
        T *yr = y + (r0 + r) * m;                                                                           \
        const T *xr = xb + r * m;                                                                           \
        if (w == NULL && b == NULL) {                                                                       \
          for (int64_t j = 0; j < m; ++j) yr[j] = (xr[j] - mu[r]) * q[r];                                   \
        } else {                                                                                            \
          int64_t f0 = k * m;                                                                              \
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
  /* rows [lo, hi): one row, one group; the statistics and the output of a row in one pass over it */         \
  static inline void fwd_rows_##SUFFIX(const T *restrict x, T *restrict y, T *restrict mean,                  \
                                       T *restrict rstd, const T *restrict w, const T *restrict b,            \
                                       int64_t lo, int64_t hi, int64_t m, int64_t G, T eps) {                 \
    for (int64_t r = lo, k = lo % G; r < hi; ++r, k = k + 1 == G ? 0 : k + 1) {                               \
      const T *restrict xr = x + r * m;                                                                       \
      T *restrict yr = y + r * m;                                                                             \
      T s = 0, acc = 0;                                                                                       \
      for (int64_t j = 0; j < m; ++j) s += xr[j];                                                             \
      T mu = s / (T)m;                                                                                        \
      for (int64_t j = 0; j < m; ++j) acc += (xr[j] - mu) * (xr[j] - mu);                                     \
      T q = (T)1 / SQRT(acc / (T)m + eps);                                                                    \
      if (UNSAFE(acc, (T)m, MAXV, MINV, EPSV)) stats_safe_##SUFFIX(xr, m, eps, &mu, &q);                       \
      mean[r] = mu;                                                                                           \
      rstd[r] = q;                                                                                            \
      const T *restrict wr = w ? w + k * m : NULL, *restrict br = b ? b + k * m : NULL;                       \
      if (wr && br) {                                                                                         \
        for (int64_t j = 0; j < m; ++j) yr[j] = (xr[j] - mu) * q * wr[j] + br[j];                             \
      } else if (wr) {                                                                                        \
        for (int64_t j = 0; j < m; ++j) yr[j] = (xr[j] - mu) * q * wr[j];                                     \
      } else if (br) {                                                                                        \
        for (int64_t j = 0; j < m; ++j) yr[j] = (xr[j] - mu) * q + br[j];                                     \
      } else {                                                                                                \
        for (int64_t j = 0; j < m; ++j) yr[j] = (xr[j] - mu) * q;                                             \
      }                                                                                                       \
    }                                                                                                         \
  }                                                                                                           \
  static inline void bwd_rows_##SUFFIX(const T *restrict g, const T *restrict x, const T *restrict mean,    \
                                       const T *restrict rstd, const T *restrict w, T *restrict dx,         \
                                       int64_t lo, int64_t hi, int64_t m, int64_t G) {                      \
    for (int64_t r = lo, k = lo % G; r < hi; ++r, k = k + 1 == G ? 0 : k + 1) {                           \
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
        for (int64_t j = 0; j < m; ++j) dr[j] = rs * (gr[j] - a - ((xr[j] - mu) * rs) * c);                 \
      } else {                                                                                              \
        const T *wr = w + k * m;                                                                            \
        for (int64_t j = 0; j < m; ++j) {                                                                   \
          a += gr[j] * wr[j];                                                                               \
          c += gr[j] * wr[j] * (xr[j] - mu);                                                                \
        }                                                                                                   \
        a /= (T)m;                                                                                          \
        c = c * rs / (T)m;                                                                                  \
        for (int64_t j = 0; j < m; ++j) dr[j] = rs * (gr[j] * wr[j] - a - ((xr[j] - mu) * rs) * c);         \
      }                                                                                                     \
    }                                                                                                       \
  }                                                                                                         \
  /* samples [lo, hi) of width d = G m */                                                                     \
  static inline void fwd_samples_##SUFFIX(const T *restrict x, T *restrict y, T *restrict mean,              \
                                          T *restrict rstd, const T *restrict w, const T *restrict b,        \
                                          int64_t lo, int64_t hi, int64_t m, int64_t G, T eps) {             \
    T mu[BLOCK], q[BLOCK], ss[BLOCK];                                                                         \
    int64_t d = G * m;                                                                                        \
    for (int64_t s = lo; s < hi; ++s) {                                                                       \
      for (int64_t k0 = 0; k0 < G; k0 += BLOCK) {                                                             \
        int64_t n = G - k0 < BLOCK ? G - k0 : BLOCK;                                                          \
        const T *restrict xb = x + s * d + k0 * m;                                                            \
        T *restrict yb = y + s * d + k0 * m;                                                                  \
        for (int64_t k = 0; k < n; ++k) {                                                                     \
          T acc = 0;                                                                                          \
          for (int64_t j = 0; j < m; ++j) acc += xb[k * m + j];                                               \
          mu[k] = acc / (T)m;                                                                                 \
        }                                                                                                     \
        for (int64_t k = 0; k < n; ++k) {                                                                     \
          T acc = 0;                                                                                          \
          for (int64_t j = 0; j < m; ++j) {                                                                   \
            T c = xb[k * m + j] - mu[k];                                                                      \
            acc += c * c;                                                                                     \
          }                                                                                                   \
          q[k] = acc;                                                                                         \
        }                                                                                                     \
        for (int64_t k = 0; k < n; ++k) ss[k] = q[k];                                                         \
        for (int64_t k = 0; k < n; ++k) q[k] = (T)1 / SQRT(q[k] / (T)m + eps);                                \
        for (int64_t k = 0; k < n; ++k)                                                                       \
          if (UNSAFE(ss[k], (T)m, MAXV, MINV, EPSV)) stats_safe_##SUFFIX(xb + k * m, m, eps, mu + k, q + k);  \
        for (int64_t k = 0; k < n; ++k) {                                                                     \
          mean[s * G + k0 + k] = mu[k];                                                                       \
          rstd[s * G + k0 + k] = q[k];                                                                        \
        }                                                                                                     \
        const T *restrict wb = w ? w + k0 * m : NULL, *restrict bb = b ? b + k0 * m : NULL;                   \
        if (wb && bb) {                                                                                       \
          for (int64_t k = 0; k < n; ++k)                                                                     \
            for (int64_t j = 0; j < m; ++j)                                                                   \
              yb[k * m + j] = (xb[k * m + j] - mu[k]) * q[k] * wb[k * m + j] + bb[k * m + j];                 \
        } else if (wb) {                                                                                      \
          for (int64_t k = 0; k < n; ++k)                                                                     \
            for (int64_t j = 0; j < m; ++j) yb[k * m + j] = (xb[k * m + j] - mu[k]) * q[k] * wb[k * m + j];   \
        } else if (bb) {                                                                                      \
          for (int64_t k = 0; k < n; ++k)                                                                     \
            for (int64_t j = 0; j < m; ++j) yb[k * m + j] = (xb[k * m + j] - mu[k]) * q[k] + bb[k * m + j];   \
        } else {                                                                                              \
          for (int64_t k = 0; k < n; ++k)                                                                     \
            for (int64_t j = 0; j < m; ++j) yb[k * m + j] = (xb[k * m + j] - mu[k]) * q[k];                   \
        }                                                                                                     \
      }                                                                                                       \
    }                                                                                                         \
  }                                                                                                           \
  static inline void bwd_samples_##SUFFIX(const T *restrict g, const T *restrict x, const T *restrict mean,  \
                                          const T *restrict rstd, const T *restrict w, T *restrict dx,       \
                                          int64_t lo, int64_t hi, int64_t m, int64_t G) {                    \
    T mu[BLOCK], rs[BLOCK], a[BLOCK], c[BLOCK];                                                               \
    int64_t d = G * m;                                                                                        \
    for (int64_t s = lo; s < hi; ++s) {                                                                       \
      for (int64_t k0 = 0; k0 < G; k0 += BLOCK) {                                                             \
        int64_t n = G - k0 < BLOCK ? G - k0 : BLOCK;                                                          \
        const T *restrict gb = g + s * d + k0 * m, *restrict xb = x + s * d + k0 * m;                         \
        T *restrict db = dx + s * d + k0 * m;                                                                 \
        for (int64_t k = 0; k < n; ++k) {                                                                     \
          mu[k] = mean[s * G + k0 + k];                                                                       \
          rs[k] = rstd[s * G + k0 + k];                                                                       \
        }                                                                                                     \
        if (w == NULL) {                                                                                      \
          for (int64_t k = 0; k < n; ++k) {                                                                   \
            T sa = 0, sc = 0;                                                                                 \
            for (int64_t j = 0; j < m; ++j) {                                                                 \
              sa += gb[k * m + j];                                                                            \
              sc += gb[k * m + j] * (xb[k * m + j] - mu[k]);                                                  \
            }                                                                                                 \
            a[k] = sa / (T)m;                                                                                 \
            c[k] = sc * rs[k] / (T)m; /* rs * rs could overflow: xhat * c below, xhat = (x - mu) * rs */     \
          }                                                                                                   \
          for (int64_t k = 0; k < n; ++k)                                                                     \
            for (int64_t j = 0; j < m; ++j)                                                                   \
              db[k * m + j] = rs[k] * (gb[k * m + j] - a[k] - ((xb[k * m + j] - mu[k]) * rs[k]) * c[k]);      \
        } else {                                                                                              \
          const T *restrict wb = w + k0 * m;                                                                  \
          for (int64_t k = 0; k < n; ++k) {                                                                   \
            T sa = 0, sc = 0;                                                                                 \
            for (int64_t j = 0; j < m; ++j) {                                                                 \
              T gw = gb[k * m + j] * wb[k * m + j];                                                           \
              sa += gw;                                                                                       \
              sc += gw * (xb[k * m + j] - mu[k]);                                                             \
            }                                                                                                 \
            a[k] = sa / (T)m;                                                                                 \
            c[k] = sc * rs[k] / (T)m; /* rs * rs could overflow: xhat * c below, xhat = (x - mu) * rs */     \
          }                                                                                                   \
          for (int64_t k = 0; k < n; ++k)                                                                     \
            for (int64_t j = 0; j < m; ++j)                                                                   \
              db[k * m + j] =                                                                                 \
                  rs[k] * (gb[k * m + j] * wb[k * m + j] - a[k] - ((xb[k * m + j] - mu[k]) * rs[k]) * c[k]);  \
        }                                                                                                     \
      }                                                                                                       \
    }                                                                                                         \
  }                                                                                                           \
  /* dw, db over the features of groups [glo, ghi) (either may be NULL): sums over the samples, in order */   \
  static inline void par_groups_##SUFFIX(const T *restrict g, const T *restrict x, const T *restrict mean,   \
                                         const T *restrict rstd, T *restrict dw, T *restrict dbias,          \
                                         int64_t samples, int64_t glo, int64_t ghi, int64_t m, int64_t G) {  \
    int64_t d = G * m;                                                                                        \
    for (int64_t f = glo * m; f < ghi * m; ++f) {                                                             \
      if (dw) dw[f] = 0;                                                                                      \
      if (dbias) dbias[f] = 0;                                                                                \
    }                                                                                                         \
    for (int64_t s = 0; s < samples; ++s) {                                                                   \
      const T *restrict gs = g + s * d, *restrict xs = x + s * d;                                             \
      const T *restrict mus = mean + s * G, *restrict rss = rstd + s * G;                                     \
      if (dbias)                                                                                              \
        for (int64_t f = glo * m; f < ghi * m; ++f) dbias[f] += gs[f];                                        \
      if (dw)                                                                                                 \
        for (int64_t k = glo; k < ghi; ++k)                                                                   \
          for (int64_t j = 0; j < m; ++j) dw[k * m + j] += gs[k * m + j] * (xs[k * m + j] - mus[k]) * rss[k]; \
    }                                                                                                         \
  }                                                                                                           \
  /* dw, db with the statistics first spread over the features (fastest for groups of 8) */                   \
  static void par_spread_##SUFFIX(const T *g, const T *x, const T *mean, const T *rstd, T *dw, T *db,         \
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
  }\
  void lng_forward_##SUFFIX(const T *x, T *y, T *mean, T *rstd, const T *w, const T *b, int64_t rows,        \
                            int64_t m, int64_t G, double eps, int threads) {                                 \
    int64_t samples = rows / G, across = m == 2;                                                            \
    int64_t units = across ? samples : rows, chunks = CHUNKS(units, across ? G * m : m, threads);              \
    PARALLEL_FOR                                                                                              \
    for (int64_t c = 0; c < chunks; ++c) {                                                                    \
      int64_t lo = c * units / chunks, hi = (c + 1) * units / chunks;                                         \
      if (m == 2) fwd_samples_##SUFFIX(x, y, mean, rstd, w, b, lo, hi, 2, G, (T)eps);                         \
      else if (m == 16) FWD_M_##SUFFIX(16);                                                                   \
      else SWITCH_M(FWB_M_##SUFFIX, m)                                                                        \
    }                                                                                                         \
  }                                                                                                           \
  void lng_backward_##SUFFIX(const T *g, const T *x, const T *mean, const T *rstd, const T *w, T *dx,        \
                             int64_t rows, int64_t m, int64_t G, int threads) {                              \
    int64_t samples = rows / G, across = m == 2;                                                            \
    int64_t units = across ? samples : rows, chunks = CHUNKS(units, across ? G * m : m, threads);              \
    PARALLEL_FOR                                                                                              \
    for (int64_t c = 0; c < chunks; ++c) {                                                                    \
      int64_t lo = c * units / chunks, hi = (c + 1) * units / chunks;                                         \
      if (m == 2) bwd_samples_##SUFFIX(g, x, mean, rstd, w, dx, lo, hi, 2, G);                                \
      else SWITCH_M(BWD_M_##SUFFIX, m)                                                                        \
    }                                                                                                         \
  }                                                                                                           \
  /* dw, db (length d = G m; either may be NULL): each thread owns a range of groups (so of features) and    \
   * sums over the samples in order, so the result does not depend on the number of threads. */             \
  void lng_param_grads_##SUFFIX(const T *g, const T *x, const T *mean, const T *rstd, T *dw, T *db,          \
                                int64_t samples, int64_t m, int64_t G, int threads) {                        \
    if (m == 8) {                                                                                           \
      par_spread_##SUFFIX(g, x, mean, rstd, dw, db, samples, m, G, threads);                                \
      return;                                                                                               \
    }                                                                                                       \
    int64_t chunks = CHUNKS(G, samples * m, threads);                                                         \
    PARALLEL_FOR                                                                                              \
    for (int64_t c = 0; c < chunks; ++c) {                                                                    \
      int64_t glo = c * G / chunks, ghi = (c + 1) * G / chunks;                                               \
      SWITCH_M(PAR_M_##SUFFIX, m)                                                                             \
    }                                                                                                         \
  }

#define FWD_M_f32(M) fwd_rows_f32(x, y, mean, rstd, w, b, lo, hi, M, G, (float)eps)
#define FWB_M_f32(M) fwd_blocks_f32(x, y, mean, rstd, w, b, lo, hi, M, G, (float)eps)
#define BWD_M_f32(M) bwd_rows_f32(g, x, mean, rstd, w, dx, lo, hi, M, G)
#define PAR_M_f32(M) par_groups_f32(g, x, mean, rstd, dw, db, samples, glo, ghi, M, G)
#define FWD_M_f64(M) fwd_rows_f64(x, y, mean, rstd, w, b, lo, hi, M, G, (double)eps)
#define FWB_M_f64(M) fwd_blocks_f64(x, y, mean, rstd, w, b, lo, hi, M, G, (double)eps)
#define BWD_M_f64(M) bwd_rows_f64(g, x, mean, rstd, w, dx, lo, hi, M, G)
#define PAR_M_f64(M) par_groups_f64(g, x, mean, rstd, dw, db, samples, glo, ghi, M, G)

DEFINE_KERNELS(float, f32, sqrtf, FLT_MAX, FLT_MIN, FLT_EPSILON)
DEFINE_KERNELS(double, f64, sqrt, DBL_MAX, DBL_MIN, DBL_EPSILON)

int lng_has_openmp(void) {
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}
