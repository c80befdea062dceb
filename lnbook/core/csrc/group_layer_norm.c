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
 * and by timing the three entry points alone, one thread). Groups of 2, 4, 8, 16 (float32, width a multiple
 * of 8): sample by sample, the group sums as a butterfly inside 8-lane vectors (a group of 16: the sum of its
 * two vectors first; fwd_vec, bwd_vec, par_vec), rstd as one vector loop over a sample's groups, the
 * per-lane mean and rstd read straight from mean[], rstd[] (spread8); when dx, dw and db are all wanted on
 * one thread, one pass over g and x gives all three (bwd_par_vec, lng_backward_params). float64 groups of
 * 2, 4: sample by sample, the statistics of a tile vectorised across groups, then spread (fwd_small).
 * Other groups of 16 run row by row, the statistics
 * and the output of a row in one pass; other sizes in blocks of BLOCK rows (the square roots of a block as
 * one vector loop). Every output loop runs over contiguous features with the affine case hoisted out of
 * it; the overflow/underflow test of a tile is one branch-free flag, and only a flagged tile is searched
 * group by group. The parameter gradients of other groups of 2 .. 8 spread the statistics over a tile's
 * features first (par_small); other sizes run group by group. The feature of a row is tracked by a
 * counter, not a division.
 * Rows are independent and every parameter-gradient sum runs over the samples in order: the result does
 * not depend on the number of threads. Compiled at first use by lnbook/core/group_norm_kernel.py; that
 * module's docstring gives the flags.
 */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

/* One chunk per thread, but never fewer than 32768 numbers per chunk (ATen's grain size). */
#define GRAIN 32768
/* Groups are taken in blocks of at most BLOCK, so that the statistics of a block sit in small local arrays
 * and their square roots run as one vector loop. */
#define BLOCK 64
/* Small groups (2 .. 16 numbers) run sample by sample in tiles of TILE features. */
#define TILE 256
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

#define SWITCH_SMALL(CALL_M, m) \
  switch (m) {                  \
    case 2: CALL_M(2); break;   \
    case 4: CALL_M(4); break;   \
    case 8: CALL_M(8); break;   \
    case 16: CALL_M(16); break; \
    default: CALL_M(m);         \
  }

/* The fast path's float sum of squared deviations is exact enough when it lies in [m * MIN / EPS, MAX] of its
 * type; outside (overflow to inf for |x| around 1e19 in float32, underflow of the squares for |x| below about
 * 1e-19, a constant group, NaN) the row's statistics are recomputed by stats_safe: the mean as on the fast
 * path (as a sum of x_j / m if that overflows), the deviations scaled by their largest magnitude before squaring, rstd = 1 / hypot(sd, sqrt(eps)).
 * This is exact to rounding for |x| < MAX / 2 of the type, and gives NaN for NaN or infinite input. */
#define UNSAFE(acc, m, MAXV, MINV, EPSV) (!((acc) <= (MAXV)) || (acc) < (m) * ((MINV) / (EPSV)))
/* The same test without a branch (bitwise or), for a vector loop that only collects a flag. */
#define UNSAFE_BITS(acc, m, MAXV, MINV, EPSV) ((!((acc) <= (MAXV))) | ((acc) < (m) * ((MINV) / (EPSV))))

/* float32 groups of 2, 4 or 8 (widths a multiple of 8): the group sums as a butterfly inside 8-lane vectors
 * (GCC/Clang vector extensions; log2(m) lane swaps and adds leave every lane holding its group's sum), so
 * the statistics come out already spread over the features and every loop runs over contiguous features.
 * Without __builtin_shufflevector (older compilers) these paths are never taken. */
#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define LNG_VECTOR 1
#endif
#endif
#ifdef LNG_VECTOR
typedef float v8f __attribute__((vector_size(32)));
static inline v8f ld8(const float *p) {
  v8f v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
static inline void st8(float *p, v8f v) { __builtin_memcpy(p, &v, sizeof v); }
/* every lane: the sum of its group of m lanes (m = 2, 4, 8; aligned groups) */
static inline v8f group_sum8(v8f v, int64_t m) {
  if (m >= 8) v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
  if (m >= 4) v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5);
  v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
  return v;
}
#define VECTOR_OK_f32(m, d) (((m) == 2 || (m) == 4 || (m) == 8 || (m) == 16) && (d) % 8 == 0)
#else
#define VECTOR_OK_f32(m, d) 0
#endif
#define VECTOR_OK_f64(m, d) 0
static void stats_safe_f32(const float *xr, int64_t m, float eps, float *mean_out, float *rstd_out);
#ifdef LNG_VECTOR
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v8i __attribute__((vector_size(32)));
/* lane-wise 1 / sqrt(t), correctly rounded square root and division (no reciprocal estimate) */
static inline v8f inv_sqrt8(v8f t) {
#ifdef __AVX__
  return 1.0f / (v8f)_mm256_sqrt_ps((__m256)t);
#else
  v8f r;
  for (int i = 0; i < 8; ++i) r[i] = 1.0f / sqrtf(t[i]);
  return r;
#endif
}
/* v itself, but opaque to the optimiser: with -fassociative-math the compiler may regroup g * ((x - mu) * r)
 * differently in two loops; dw's terms go through this, so the one-pass backward (bwd_par_vec) and the
 * parameter-gradient pass (par_vec) round them the same way. Where no such barrier is written the one-pass
 * backward is not used (LNG_ONE_PASS). */
#if defined(__x86_64__) || defined(__i386__)
#define LNG_ONE_PASS 1
static inline v8f opaque8(v8f v) {
#ifdef __AVX__
  __asm__("" : "+x"(v)); /* one ymm register */
#else
  __asm__("" : "+m"(v)); /* without AVX a v8f is no one register ("+x" does not compile) */
#endif
  return v;
}
#elif defined(__aarch64__)
#define LNG_ONE_PASS 1
static inline v8f opaque8(v8f v) {
  __asm__("" : "+m"(v)); /* memory: a 32-byte v8f is no one register ("+w" does not hold it) */
  return v;
}
#else
static inline v8f opaque8(v8f v) { return v; }
#endif
/* the per-group values s[0 .. 8/m) spread over 8 lanes, every value repeated m times (m = 2, 4, 8) */
static inline v8f spread8(const float *s, int64_t m) {
  if (m >= 8) return (v8f){0} + s[0];
  if (m == 4) {
#ifdef __AVX__
    v4f v = (v4f)_mm_castsi128_ps(_mm_loadu_si64(s)); /* one 64-bit load */
#else
    v4f v = {s[0], s[1], 0, 0};
#endif
    return __builtin_shufflevector(v, v, 0, 0, 0, 0, 1, 1, 1, 1);
  }
  v4f v;
  __builtin_memcpy(&v, s, sizeof v);
  return __builtin_shufflevector(v, v, 0, 0, 1, 1, 2, 2, 3, 3);
}
#endif
#ifdef LNG_VECTOR
/* the statistics of the vector at xp (m = 2, 4, 8) or of the two at xp, xp + 8 (m = 16): every lane holds
 * its group's mean and sum of squared deviations */
static inline void vec_stats(const float *xp, int64_t m, v8f inv, v8f *mu, v8f *q) {
  if (m == 16) {
    v8f v0 = ld8(xp), v1 = ld8(xp + 8), u = group_sum8(v0 + v1, 8) * inv, c0 = v0 - u, c1 = v1 - u;
    *mu = u;
    *q = group_sum8(c0 * c0 + c1 * c1, 8);
    return;
  }
  v8f v = ld8(xp), u = group_sum8(v, m) * inv, c = v - u;
  *mu = u;
  *q = group_sum8(c * c, m);
}
#endif
#ifdef LNG_ONE_PASS
#define ONE_PASS_OK 1
#else
#define ONE_PASS_OK 0
#endif
/* samples [lo, hi) of width d = G m, three passes over a sample: the group sums by butterfly, every group's
 * mean and sum of squared deviations q stored once (q in rstd[] for now); rstd = 1 / sqrt(q * (1 / m) + eps)
 * as a vector loop over the groups (q * (1 / m) is q / m exactly, m a power of two), with the
 * overflow/underflow flag as a mask (only a flagged sample is searched group by group and goes through
 * stats_safe); then the output, the per-lane mean and rstd taken straight from mean[], rstd[] (spread8). */
static inline void fwd_vec_f32(const float *restrict x, float *restrict y, float *restrict mean,
                               float *restrict rstd, const float *restrict w, const float *restrict b,
                               int64_t lo, int64_t hi, int64_t m, int64_t G, float eps) {
#ifdef LNG_VECTOR
  int64_t d = G * m, G8 = G - G % 8, step = m > 8 ? m : 8; /* step: features per vec_stats */
  const v8f inv = (v8f){0} + 1.0f / (float)m, maxv = (v8f){0} + FLT_MAX,
            minv = (v8f){0} + (float)m * (FLT_MIN / FLT_EPSILON);
  for (int64_t s = lo; s < hi; ++s) {
    const float *restrict xb = x + s * d;
    float *restrict yb = y + s * d, *restrict mo = mean + s * G, *restrict ro = rstd + s * G;
    v8i bad = {0};
    int any = 0;
    if (m == 2) { /* 8 groups = 2 vectors at a time, the statistics compacted by one shuffle */
      for (int64_t k = 0; k < G8; k += 8) {
        v8f v0 = ld8(xb + 2 * k), v1 = ld8(xb + 2 * k + 8);
        v8f mu0 = group_sum8(v0, 2) * inv, mu1 = group_sum8(v1, 2) * inv, c0 = v0 - mu0, c1 = v1 - mu1;
        v8f q0 = group_sum8(c0 * c0, 2), q1 = group_sum8(c1 * c1, 2);
        v8f q = __builtin_shufflevector(q0, q1, 0, 2, 4, 6, 8, 10, 12, 14);
        bad |= ~(q <= maxv) | (q < minv);
        st8(mo + k, __builtin_shufflevector(mu0, mu1, 0, 2, 4, 6, 8, 10, 12, 14));
        st8(ro + k, inv_sqrt8(q * inv + eps));
      }
    } else { /* every group's mean and q stored lane by lane (q in rstd[] for now), then rstd 8 groups at once */
      for (int64_t f = 0; f < G8 * m; f += step) {
        v8f mu, q;
        vec_stats(xb + f, m, inv, &mu, &q);
        for (int i = 0; i < 8; i += (int)m) {
          mo[(f + i) / m] = mu[i];
          ro[(f + i) / m] = q[i];
        }
      }
      for (int64_t k = 0; k < G8; k += 8) {
        v8f q = ld8(ro + k);
        bad |= ~(q <= maxv) | (q < minv);
        st8(ro + k, inv_sqrt8(q * inv + eps));
      }
    }
    for (int i = 0; i < 8; ++i) any |= bad[i];
    for (int64_t f = G8 * m; f < d; f += step) { /* the last G % 8 groups */
      v8f mu, q;
      vec_stats(xb + f, m, inv, &mu, &q);
      for (int i = 0; i < 8; i += (int)m) {
        any |= UNSAFE(q[i], (float)m, FLT_MAX, FLT_MIN, FLT_EPSILON);
        mo[(f + i) / m] = mu[i];
        ro[(f + i) / m] = 1.0f / sqrtf(q[i] * (1.0f / (float)m) + eps);
      }
    }
    if (any)
      for (int64_t f = 0; f < d; f += step) { /* the same sums again, to find the flagged groups */
        v8f mu, q;
        vec_stats(xb + f, m, inv, &mu, &q);
        for (int i = 0; i < 8; i += (int)m)
          if (UNSAFE(q[i], (float)m, FLT_MAX, FLT_MIN, FLT_EPSILON))
            stats_safe_f32(xb + f + i, m, eps, mo + (f + i) / m, ro + (f + i) / m);
      }
#define FWV_LOOP(OUT)                                                                                         \
  for (int64_t f = 0; f < d; f += 8) {                                                                        \
    v8f r = spread8(ro + f / m, m), c = ld8(xb + f) - spread8(mo + f / m, m);                                 \
    st8(yb + f, OUT);                                                                                         \
  }
    if (w && b)
      FWV_LOOP(c * r * ld8(w + f) + ld8(b + f))
    else if (w)
      FWV_LOOP(c * r * ld8(w + f))
    else if (b)
      FWV_LOOP(c * r + ld8(b + f))
    else
      FWV_LOOP(c * r)
#undef FWV_LOOP
  }
#endif
}
/* samples [lo, hi): the per-lane mean and rstd straight from mean[], rstd[] (spread8), the group sums by
 * butterfly */
static inline void bwd_vec_f32(const float *restrict g, const float *restrict x, const float *restrict mean,
                               const float *restrict rstd, const float *restrict w, float *restrict dx,
                               int64_t lo, int64_t hi, int64_t m, int64_t G) {
#ifdef LNG_VECTOR
  int64_t d = G * m;
  const v8f inv = (v8f){0} + 1.0f / (float)m;
  for (int64_t s = lo; s < hi; ++s) {
    const float *restrict gb = g + s * d, *restrict xb = x + s * d;
    float *restrict db = dx + s * d;
    const float *restrict ms = mean + s * G, *restrict rs = rstd + s * G;
#define BWD_VEC_STEP(GW)                                                                                      \
  do {                                                                                                        \
    v8f gw = (GW), r = spread8(rs + f / m, m), xh = opaque8((ld8(xb + f) - spread8(ms + f / m, m)) * r);      \
    v8f a = group_sum8(gw, m) * inv, c = group_sum8(gw * xh, m) * inv;                                        \
    st8(db + f, r * (gw - a - xh * c));                                                                       \
  } while (0)
    if (m == 16) /* a group is two vectors */
      for (int64_t f = 0; f < d; f += 16) {
        v8f g0 = ld8(gb + f), g1 = ld8(gb + f + 8);
        if (w) g0 *= ld8(w + f), g1 *= ld8(w + f + 8);
        v8f r = spread8(rs + f / m, m), mu = spread8(ms + f / m, m);
        v8f xh0 = opaque8((ld8(xb + f) - mu) * r), xh1 = opaque8((ld8(xb + f + 8) - mu) * r);
        v8f a = group_sum8(g0 + g1, 8) * inv, c = group_sum8(g0 * xh0 + g1 * xh1, 8) * inv;
        st8(db + f, r * (g0 - a - xh0 * c));
        st8(db + f + 8, r * (g1 - a - xh1 * c));
      }
    else if (w)
      for (int64_t f = 0; f < d; f += 8) BWD_VEC_STEP(ld8(gb + f) * ld8(w + f));
    else
      for (int64_t f = 0; f < d; f += 8) BWD_VEC_STEP(ld8(gb + f));
#undef BWD_VEC_STEP
  }
#endif
}
/* dw, db over features [flo, fhi) (multiples of 8), sample by sample in order */
static inline void par_vec_f32(const float *restrict g, const float *restrict x, const float *restrict mean,
                               const float *restrict rstd, float *restrict dw, float *restrict dbias,
                               int64_t samples, int64_t flo, int64_t fhi, int64_t m, int64_t G) {
#ifdef LNG_VECTOR
  int64_t d = G * m;
  for (int64_t f = flo; f < fhi; ++f) {
    if (dw) dw[f] = 0;
    if (dbias) dbias[f] = 0;
  }
  for (int64_t s = 0; s < samples; ++s) {
    const float *restrict gb = g + s * d, *restrict xb = x + s * d;
    const float *restrict ms = mean + s * G, *restrict rs = rstd + s * G;
    if (dbias)
      for (int64_t f = flo; f < fhi; f += 8) st8(dbias + f, ld8(dbias + f) + ld8(gb + f));
    if (dw)
      for (int64_t f = flo; f < fhi; f += 8) {
        v8f xh = opaque8((ld8(xb + f) - spread8(ms + f / m, m)) * spread8(rs + f / m, m));
        st8(dw + f, ld8(dw + f) + opaque8(ld8(gb + f) * xh));
      }
  }
#endif
}
/* dx, dw and db in one pass over g and x (samples [0, samples) in order, so every dw, db sum runs over the
 * samples in order as in par_vec: the same numbers as bwd_vec then par_vec) */
static inline void bwd_par_vec_f32(const float *restrict g, const float *restrict x, const float *restrict mean,
                                   const float *restrict rstd, const float *restrict w, float *restrict dx,
                                   float *restrict dw, float *restrict dbias, int64_t samples, int64_t m,
                                   int64_t G) {
#ifdef LNG_VECTOR
  int64_t d = G * m;
  const v8f inv = (v8f){0} + 1.0f / (float)m;
  for (int64_t f = 0; f < d; ++f) dw[f] = dbias[f] = 0;
  for (int64_t s = 0; s < samples; ++s) {
    const float *restrict gb = g + s * d, *restrict xb = x + s * d;
    float *restrict db = dx + s * d;
    const float *restrict ms = mean + s * G, *restrict rs = rstd + s * G;
    if (m == 16) /* a group is two vectors */
      for (int64_t f = 0; f < d; f += 16) {
        v8f gv0 = ld8(gb + f), gv1 = ld8(gb + f + 8), g0 = gv0 * ld8(w + f), g1 = gv1 * ld8(w + f + 8);
        v8f r = spread8(rs + f / m, m), mu = spread8(ms + f / m, m);
        v8f xh0 = opaque8((ld8(xb + f) - mu) * r), xh1 = opaque8((ld8(xb + f + 8) - mu) * r);
        v8f a = group_sum8(g0 + g1, 8) * inv, c = group_sum8(g0 * xh0 + g1 * xh1, 8) * inv;
        st8(db + f, r * (g0 - a - xh0 * c));
        st8(db + f + 8, r * (g1 - a - xh1 * c));
        st8(dbias + f, ld8(dbias + f) + gv0);
        st8(dbias + f + 8, ld8(dbias + f + 8) + gv1);
        st8(dw + f, ld8(dw + f) + opaque8(gv0 * xh0));
        st8(dw + f + 8, ld8(dw + f + 8) + opaque8(gv1 * xh1));
      }
    else
      for (int64_t f = 0; f < d; f += 8) {
        v8f gv = ld8(gb + f), gw = gv * ld8(w + f), r = spread8(rs + f / m, m);
        v8f xh = opaque8((ld8(xb + f) - spread8(ms + f / m, m)) * r);
        v8f a = group_sum8(gw, m) * inv, c = group_sum8(gw * xh, m) * inv;
        st8(db + f, r * (gw - a - xh * c));
        st8(dbias + f, ld8(dbias + f) + gv);
        st8(dw + f, ld8(dw + f) + opaque8(gv * xh));
      }
  }
#endif
}
static inline void bwd_par_vec_f64(const double *g, const double *x, const double *mean, const double *rstd,
                                   const double *w, double *dx, double *dw, double *dbias, int64_t samples,
                                   int64_t m, int64_t G) {
  (void)g, (void)x, (void)mean, (void)rstd, (void)w, (void)dx, (void)dw, (void)dbias, (void)samples, (void)m,
      (void)G;
}
static inline void fwd_vec_f64(const double *x, double *y, double *mean, double *rstd, const double *w,
                               const double *b, int64_t lo, int64_t hi, int64_t m, int64_t G, double eps) {
  (void)x, (void)y, (void)mean, (void)rstd, (void)w, (void)b, (void)lo, (void)hi, (void)m, (void)G, (void)eps;
}
static inline void par_vec_f64(const double *g, const double *x, const double *mean, const double *rstd,
                               double *dw, double *dbias, int64_t samples, int64_t flo, int64_t fhi, int64_t m,
                               int64_t G) {
  (void)g, (void)x, (void)mean, (void)rstd, (void)dw, (void)dbias, (void)samples, (void)flo, (void)fhi, (void)m,
      (void)G;
}
static inline void bwd_vec_f64(const double *g, const double *x, const double *mean, const double *rstd,
                               const double *w, double *dx, int64_t lo, int64_t hi, int64_t m, int64_t G) {
  (void)g, (void)x, (void)mean, (void)rstd, (void)w, (void)dx, (void)lo, (void)hi, (void)m, (void)G;
}

/* The input gradient of a group is rs * (gw - mean(gw) - xhat * c), xhat = (x - mu) * rs, c = mean(gw * xhat). Both
 * xhat and c carry a factor rs, and under -fassociative-math the compiler may regroup a product of several factors
 * in any order: with c formed as sum(gw * (x - mu)) * rs / m (the kernel until issue 32) GCC 12 computed rs * rs
 * once per group and multiplied by it, and rs * rs leaves the type where a group's standard deviation is beyond
 * 2^63 or below 2^-63 in float32 (2^511 / 2^-511 in float64; the forward is right there): the float32 input
 * gradient of groups of 32, 64 and 128 was 10-60% off at |x| ~ 2^80; and it may form gw * (x - mu) before the
 * product with rs, which overflows once |x| nears the top of the range. So the scalar backward loops (bwd_rows,
 * bwd_samples) write xhat = (x - mu) * rs into dx first and then make dx opaque to the optimiser (LNG_FORGET(p):
 * the compiler must assume that the empty asm rewrote the memory at p; it emits no instruction), and read xhat
 * back from there: no product of the remaining loops holds two factors rs, or gw and (x - mu) without rs. The
 * vector paths do the same with opaque8. */
#if defined(__GNUC__) || defined(__clang__)
#define LNG_FORGET(p) __asm__("" : : "r"(p) : "memory")
#else
#define LNG_FORGET(p) ((void)(p)) /* without GNU asm the reassociation flags are not given either */
#endif

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
      for (int64_t j = 0; j < m; ++j) dr[j] = (xr[j] - mu) * rs; /* xhat, kept in dx for now */            \
      LNG_FORGET(dr);                                                                                       \
      if (w == NULL) {                                                                                      \
        for (int64_t j = 0; j < m; ++j) {                                                                   \
          a += gr[j];                                                                                       \
          c += gr[j] * dr[j];                                                                               \
        }                                                                                                   \
        a /= (T)m;                                                                                          \
        c /= (T)m;                                                                                          \
        for (int64_t j = 0; j < m; ++j) dr[j] = rs * (gr[j] - a - dr[j] * c);                               \
      } else {                                                                                              \
        const T *wr = w + k * m;                                                                            \
        for (int64_t j = 0; j < m; ++j) {                                                                   \
          a += gr[j] * wr[j];                                                                               \
          c += gr[j] * wr[j] * dr[j];                                                                       \
        }                                                                                                   \
        a /= (T)m;                                                                                          \
        c /= (T)m;                                                                                          \
        for (int64_t j = 0; j < m; ++j) dr[j] = rs * (gr[j] * wr[j] - a - dr[j] * c);                       \
      }                                                                                                     \
    }                                                                                                       \
  }                                                                                                         \
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
        for (int64_t k = 0; k < n; ++k) /* xhat, kept in dx for now */                                        \
          for (int64_t j = 0; j < m; ++j) db[k * m + j] = (xb[k * m + j] - mu[k]) * rs[k];                    \
        LNG_FORGET(db);                                                                                       \
        if (w == NULL) {                                                                                      \
          for (int64_t k = 0; k < n; ++k) {                                                                   \
            T sa = 0, sc = 0;                                                                                 \
            for (int64_t j = 0; j < m; ++j) {                                                                 \
              sa += gb[k * m + j];                                                                            \
              sc += gb[k * m + j] * db[k * m + j];                                                            \
            }                                                                                                 \
            a[k] = sa / (T)m;                                                                                 \
            c[k] = sc / (T)m;                                                                                 \
          }                                                                                                   \
          for (int64_t k = 0; k < n; ++k)                                                                     \
            for (int64_t j = 0; j < m; ++j)                                                                   \
              db[k * m + j] = rs[k] * (gb[k * m + j] - a[k] - db[k * m + j] * c[k]);                          \
        } else {                                                                                              \
          const T *restrict wb = w + k0 * m;                                                                  \
          for (int64_t k = 0; k < n; ++k) {                                                                   \
            T sa = 0, sc = 0;                                                                                 \
            for (int64_t j = 0; j < m; ++j) {                                                                 \
              T gw = gb[k * m + j] * wb[k * m + j];                                                           \
              sa += gw;                                                                                       \
              sc += gw * db[k * m + j];                                                                       \
            }                                                                                                 \
            a[k] = sa / (T)m;                                                                                 \
            c[k] = sc / (T)m;                                                                                 \
          }                                                                                                   \
          for (int64_t k = 0; k < n; ++k)                                                                     \
            for (int64_t j = 0; j < m; ++j)                                                                   \
              db[k * m + j] = rs[k] * (gb[k * m + j] * wb[k * m + j] - a[k] - db[k * m + j] * c[k]);          \
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
  /* Small groups (m = 2 .. 16), sample by sample in tiles of TILE features: the statistics of a tile's       \
   * groups as vector loops across groups, spread over the features into local arrays, then every             \
   * per-feature loop runs over contiguous features with no branch inside (one loop per affine case). */      \
  static inline void fwd_small_##SUFFIX(const T *restrict x, T *restrict y, T *restrict mean,                 \
                                        T *restrict rstd, const T *restrict w, const T *restrict b,           \
                                        int64_t lo, int64_t hi, int64_t m, int64_t G, T eps) {                \
    T gm[TILE / 2], gq[TILE / 2], gs[TILE / 2], mf[TILE], rf[TILE];                                           \
    int64_t d = G * m;                                                                                        \
    for (int64_t s = lo; s < hi; ++s) {                                                                       \
      for (int64_t f0 = 0; f0 < d; f0 += TILE) {                                                              \
        int64_t n = d - f0 < TILE ? d - f0 : TILE, ng = n / m;                                                \
        const T *restrict xb = x + s * d + f0;                                                                \
        T *restrict yb = y + s * d + f0;                                                                      \
        for (int64_t k = 0; k < ng; ++k) {                                                                    \
          T a = 0;                                                                                            \
          for (int64_t j = 0; j < m; ++j) a += xb[k * m + j];                                                 \
          gm[k] = a / (T)m;                                                                                   \
        }                                                                                                     \
        for (int64_t k = 0; k < ng; ++k) {                                                                    \
          T a = 0;                                                                                            \
          for (int64_t j = 0; j < m; ++j) a += (xb[k * m + j] - gm[k]) * (xb[k * m + j] - gm[k]);             \
          gs[k] = a;                                                                                          \
        }                                                                                                     \
        int bad = 0;                                                                                          \
        for (int64_t k = 0; k < ng; ++k) {                                                                    \
          gq[k] = (T)1 / SQRT(gs[k] / (T)m + eps);                                                            \
          bad |= UNSAFE_BITS(gs[k], (T)m, MAXV, MINV, EPSV);                                                  \
        }                                                                                                     \
        if (bad)                                                                                              \
          for (int64_t k = 0; k < ng; ++k)                                                                    \
            if (UNSAFE(gs[k], (T)m, MAXV, MINV, EPSV)) stats_safe_##SUFFIX(xb + k * m, m, eps, gm + k, gq + k);\
        for (int64_t k = 0; k < ng; ++k) {                                                                    \
          mean[s * G + f0 / m + k] = gm[k];                                                                   \
          rstd[s * G + f0 / m + k] = gq[k];                                                                   \
        }                                                                                                     \
        for (int64_t k = 0; k < ng; ++k)                                                                      \
          for (int64_t j = 0; j < m; ++j) {                                                                   \
            mf[k * m + j] = gm[k];                                                                            \
            rf[k * m + j] = gq[k];                                                                            \
          }                                                                                                   \
        if (w && b) {                                                                                         \
          const T *restrict wb = w + f0, *restrict bb = b + f0;                                               \
          for (int64_t f = 0; f < n; ++f) yb[f] = (xb[f] - mf[f]) * rf[f] * wb[f] + bb[f];                    \
        } else if (w) {                                                                                       \
          const T *restrict wb = w + f0;                                                                      \
          for (int64_t f = 0; f < n; ++f) yb[f] = (xb[f] - mf[f]) * rf[f] * wb[f];                            \
        } else if (b) {                                                                                       \
          const T *restrict bb = b + f0;                                                                      \
          for (int64_t f = 0; f < n; ++f) yb[f] = (xb[f] - mf[f]) * rf[f] + bb[f];                            \
        } else {                                                                                              \
          for (int64_t f = 0; f < n; ++f) yb[f] = (xb[f] - mf[f]) * rf[f];                                    \
        }                                                                                                     \
      }                                                                                                       \
    }                                                                                                         \
  }                                                                                                           \
  /* dw, db over features [flo, fhi) (whole groups), sample by sample in order, the statistics spread over    \
   * the features of a tile first */                                                                          \
  static inline void par_small_##SUFFIX(const T *restrict g, const T *restrict x, const T *restrict mean,     \
                                        const T *restrict rstd, T *restrict dw, T *restrict dbias,            \
                                        int64_t samples, int64_t flo, int64_t fhi, int64_t m, int64_t G) {    \
    T mf[TILE], rf[TILE];                                                                                     \
    int64_t d = G * m;                                                                                        \
    for (int64_t f = flo; f < fhi; ++f) {                                                                     \
      if (dw) dw[f] = 0;                                                                                      \
      if (dbias) dbias[f] = 0;                                                                                \
    }                                                                                                         \
    for (int64_t f0 = flo; f0 < fhi; f0 += TILE) {                                                            \
      int64_t n = fhi - f0 < TILE ? fhi - f0 : TILE, ng = n / m;                                              \
      T *restrict dwb = dw ? dw + f0 : NULL, *restrict dbb = dbias ? dbias + f0 : NULL;                       \
      for (int64_t s = 0; s < samples; ++s) {                                                                 \
        const T *restrict gb = g + s * d + f0, *restrict xb = x + s * d + f0;                                 \
        if (dbb)                                                                                              \
          for (int64_t f = 0; f < n; ++f) dbb[f] += gb[f];                                                    \
        if (!dwb) continue;                                                                                   \
        const T *restrict ms = mean + s * G + f0 / m, *restrict rs = rstd + s * G + f0 / m;                   \
        for (int64_t k = 0; k < ng; ++k)                                                                      \
          for (int64_t j = 0; j < m; ++j) {                                                                   \
            mf[k * m + j] = ms[k];                                                                            \
            rf[k * m + j] = rs[k];                                                                            \
          }                                                                                                   \
        for (int64_t f = 0; f < n; ++f) dwb[f] += gb[f] * ((xb[f] - mf[f]) * rf[f]);                          \
      }                                                                                                       \
    }                                                                                                         \
  }                                                                                                           \
  void lng_forward_##SUFFIX(const T *x, T *y, T *mean, T *rstd, const T *w, const T *b, int64_t rows,         \
                            int64_t m, int64_t G, double eps, int threads) {                                  \
    int64_t samples = rows / G, vec = VECTOR_OK_##SUFFIX(m, G * m), small = vec || m == 2 || m == 4;          \
    int64_t units = small ? samples : rows, chunks = CHUNKS(units, small ? G * m : m, threads);               \
    PARALLEL_FOR                                                                                              \
    for (int64_t c = 0; c < chunks; ++c) {                                                                    \
      int64_t lo = c * units / chunks, hi = (c + 1) * units / chunks;                                         \
      if (vec) SWITCH_SMALL(FWV_M_##SUFFIX, m)                                                                \
      else if (small) SWITCH_SMALL(FWS_M_##SUFFIX, m)                                                         \
      else if (m == 16) FWD_M_##SUFFIX(16);                                                                   \
      else SWITCH_M(FWB_M_##SUFFIX, m)                                                                        \
    }                                                                                                         \
  }                                                                                                           \
  void lng_backward_##SUFFIX(const T *g, const T *x, const T *mean, const T *rstd, const T *w, T *dx,         \
                             int64_t rows, int64_t m, int64_t G, int threads) {                               \
    int64_t samples = rows / G, vec = VECTOR_OK_##SUFFIX(m, G * m), by_samples = vec || m == 2;               \
    int64_t units = by_samples ? samples : rows, chunks = CHUNKS(units, by_samples ? G * m : m, threads);     \
    PARALLEL_FOR                                                                                              \
    for (int64_t c = 0; c < chunks; ++c) {                                                                    \
      int64_t lo = c * units / chunks, hi = (c + 1) * units / chunks;                                         \
      if (vec) SWITCH_SMALL(BWV_M_##SUFFIX, m)                                                                \
      else if (m == 2) bwd_samples_##SUFFIX(g, x, mean, rstd, w, dx, lo, hi, 2, G);                           \
      else SWITCH_M(BWD_M_##SUFFIX, m)                                                                        \
    }                                                                                                         \
  }                                                                                                           \
  /* dw, db (length d = G m; either may be NULL): each thread owns a range of groups (so of features; on the \
   * vector path, of 8-feature blocks) and sums over the samples in order, so the result does not depend on \
   * the number of threads. */                                                                              \
  void lng_param_grads_##SUFFIX(const T *g, const T *x, const T *mean, const T *rstd, T *dw, T *db,          \
                                int64_t samples, int64_t m, int64_t G, int threads) {                        \
    int64_t vec = VECTOR_OK_##SUFFIX(m, G * m), units = vec ? G * m / 8 : G;                                  \
    int64_t chunks = CHUNKS(units, samples * (vec ? 8 : m), threads);                                         \
    PARALLEL_FOR                                                                                              \
    for (int64_t c = 0; c < chunks; ++c) {                                                                    \
      int64_t glo = c * units / chunks, ghi = (c + 1) * units / chunks;                                       \
      if (vec) SWITCH_SMALL(PAV_M_##SUFFIX, m)                                                                \
      else if (m == 2 || m == 4 || m == 8) SWITCH_SMALL(PAS_M_##SUFFIX, m)                                    \
      else SWITCH_M(PAR_M_##SUFFIX, m)                                                                        \
    }                                                                                                         \
  }                                                                                                           \
  /* dx, dw and db (w, dw, db not NULL): one pass over g and x on the vector path when it runs on one thread, \
   * else lng_backward then lng_param_grads (the same numbers either way) */                                  \
  void lng_backward_params_##SUFFIX(const T *g, const T *x, const T *mean, const T *rstd, const T *w, T *dx,  \
                                    T *dw, T *db, int64_t rows, int64_t m, int64_t G, int threads) {          \
    int64_t samples = rows / G;                                                                               \
    if (ONE_PASS_OK && VECTOR_OK_##SUFFIX(m, G * m) && CHUNKS(samples, G * m, threads) == 1 &&                               \
        CHUNKS(G * m / 8, samples * 8, threads) == 1) {                                                       \
      SWITCH_SMALL(BPV_M_##SUFFIX, m)                                                                         \
      return;                                                                                                 \
    }                                                                                                         \
    lng_backward_##SUFFIX(g, x, mean, rstd, w, dx, rows, m, G, threads);                                      \
    lng_param_grads_##SUFFIX(g, x, mean, rstd, dw, db, samples, m, G, threads);                               \
  }

#define BPV_M_f32(M) bwd_par_vec_f32(g, x, mean, rstd, w, dx, dw, db, samples, M, G)
#define BPV_M_f64(M) bwd_par_vec_f64(g, x, mean, rstd, w, dx, dw, db, samples, M, G)
#define PAV_M_f32(M) par_vec_f32(g, x, mean, rstd, dw, db, samples, glo * 8, ghi * 8, M, G)
#define PAV_M_f64(M) par_vec_f64(g, x, mean, rstd, dw, db, samples, glo * 8, ghi * 8, M, G)
#define FWV_M_f32(M) fwd_vec_f32(x, y, mean, rstd, w, b, lo, hi, M, G, (float)eps)
#define BWV_M_f32(M) bwd_vec_f32(g, x, mean, rstd, w, dx, lo, hi, M, G)
#define FWV_M_f64(M) fwd_vec_f64(x, y, mean, rstd, w, b, lo, hi, M, G, eps)
#define BWV_M_f64(M) bwd_vec_f64(g, x, mean, rstd, w, dx, lo, hi, M, G)
#define FWS_M_f32(M) fwd_small_f32(x, y, mean, rstd, w, b, lo, hi, M, G, (float)eps)
#define BWS_M_f32(M) bwd_small_f32(g, x, mean, rstd, w, dx, lo, hi, M, G)
#define PAS_M_f32(M) par_small_f32(g, x, mean, rstd, dw, db, samples, glo * M, ghi * M, M, G)
#define FWS_M_f64(M) fwd_small_f64(x, y, mean, rstd, w, b, lo, hi, M, G, (double)eps)
#define BWS_M_f64(M) bwd_small_f64(g, x, mean, rstd, w, dx, lo, hi, M, G)
#define PAS_M_f64(M) par_small_f64(g, x, mean, rstd, dw, db, samples, glo * M, ghi * M, M, G)
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
