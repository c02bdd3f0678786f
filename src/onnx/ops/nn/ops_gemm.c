/* The host GEMM that Conv, ConvTranspose, Gemm and MatMul share, and the
 * Gemm and MatMul operators.
 *
 * The GEMM packs its operands into panels the micro-kernel reads in order:
 * a block of B (KC x NC, kept in L2) is packed once and reused by every
 * row panel of A, each A panel (KC x MR, kept in L1) by every column panel
 * of the block. Packing reads through strides, so transposed operands cost
 * nothing extra, and a convolution's im2col matrix is packed straight from
 * the image, so no column buffer is ever written. The micro-kernel is plain
 * C with fixed trip counts that gcc vectorises; on x86-64 it is built twice,
 * for the baseline and for AVX2, and the loader picks one (the two sum in
 * the same order, so results do not depend on the machine). */
#include <string.h>

#include "nn-impl.h"

#ifdef KP_HAVE_CUDA
#include <cublas_v2.h>
#endif

_Static_assert(sizeof(kp__ox_gemm) <= KP_MAX_KERNEL_PARAMS, "the GEMM's parameters are a kernel's");

#define KP__MR KP__OX_GEMM_MR
#define KP__NR KP__OX_GEMM_NR
#define KP__KC 256
#define KP__NC (4 * KP__NR)
#define KP__MC 256

/* Function clones need the loader's ifunc support (glibc). Their resolver
 * runs while the program loads, before ThreadSanitizer's runtime is up,
 * which then crashes: sanitizer builds take the plain version. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define KP__NO_CLONES 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define KP__NO_CLONES 1
#endif
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(KP__NO_CLONES)
#define KP__CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KP__CLONES
#endif

/* acc = A panel (kc x MR) times B panel (kc x NR), both packed k-major.
 * The unroll counts matter: they leave the column loop for the vectoriser
 * and then unroll what it made, so the 4 x 24 accumulators stay in
 * registers; unrolling the columns fully first makes gcc build shuffled
 * vectors that spill. */
KP__CLONES static void kp__micro(int64_t kc, const float *restrict a, const float *restrict b,
                                 float *restrict acc) {
    float c[KP__MR][KP__NR];
    memset(c, 0, sizeof c);
    for (int64_t p = 0; p < kc; p++) {
        const float *ap = a + p * KP__MR, *bp = b + p * KP__NR;
        _Pragma("GCC unroll 8") for (int i = 0; i < KP__MR; i++) {
            _Pragma("GCC unroll 16") for (int j = 0; j < KP__NR; j++) c[i][j] += ap[i] * bp[j];
        }
    }
    memcpy(acc, c, sizeof c);
}

/* One operand of one batch entry: element (r, p) at p[r*rs + p*ks], or of
 * the im2col view of `win` over the image at p, or packed panels. */
typedef struct kp__src {
    const float *p;
    int64_t rs, ks;
    const kp__ox_win *win;
    bool packed;
} kp__src;

static void kp__pack_strided(const kp__src *s, int64_t r0, int rn, int64_t k0, int kc, int width,
                             float *dst) {
    const float *base = s->p + r0 * s->rs + k0 * s->ks;
    if (s->rs == 1) {
        for (int p = 0; p < kc; p++)
            memcpy(dst + (int64_t)p * width, base + p * s->ks, (size_t)rn * sizeof(float));
    } else if (s->ks == 1 && rn == KP__MR && width == KP__MR) {
        /* A full row panel of a row-major operand: four streams at once. */
        const float *r0p = base, *r1p = base + s->rs, *r2p = base + 2 * s->rs, *r3p = base + 3 * s->rs;
        for (int p = 0; p < kc; p++) {
            dst[4 * p] = r0p[p];
            dst[4 * p + 1] = r1p[p];
            dst[4 * p + 2] = r2p[p];
            dst[4 * p + 3] = r3p[p];
        }
    } else if (s->ks == 1) {
        for (int j = 0; j < rn; j++) {
            const float *src = base + j * s->rs;
            for (int p = 0; p < kc; p++) dst[(int64_t)p * width + j] = src[p];
        }
    } else {
        for (int p = 0; p < kc; p++)
            for (int j = 0; j < rn; j++)
                dst[(int64_t)p * width + j] = base[j * s->rs + p * s->ks];
    }
}

/* A stretch of consecutive output positions on one output row. */
typedef struct kp__run {
    int j, len;
    int64_t z, y, x; /* input coordinates of its first position before the kernel offset */
} kp__run;

/* d[q] = row[ix + q*stride] for q < len, zero outside the row. Copies are
 * fixed-size memcpy calls the compiler turns into vector moves. */
static void kp__copy_row(const float *row, int64_t ix, int len, const kp__ox_win *w, float *d) {
    int64_t s = w->stride[2], n = w->in[2];
    int q0 = 0, q1 = len;
    while (q0 < len && ix + q0 * s < 0) d[q0++] = 0.0f;
    while (q1 > q0 && ix + (q1 - 1) * s >= n) d[--q1] = 0.0f;
    const float *src = row + ix + q0 * s;
    int q = q0;
    if (s == 1) {
        for (; q + 8 <= q1; q += 8, src += 8) memcpy(d + q, src, 8 * sizeof(float));
        for (; q + 4 <= q1; q += 4, src += 4) memcpy(d + q, src, 4 * sizeof(float));
        for (; q < q1; q++) d[q] = *src++;
    } else {
        for (; q < q1; q++, src += s) d[q] = *src;
    }
}

/* Packs im2col rows [k0, k0 + kc) of columns [r0, r0 + rn). Positions are
 * grouped into runs along output rows so that a unit-stride run inside
 * the image is one copy. */
static void kp__pack_win(const kp__src *s, int64_t r0, int rn, int64_t k0, int kc, int width,
                         float *dst) {
    const kp__ox_win *w = s->win;
    kp__run runs[KP__NR];
    int nruns = 0;
    for (int j = 0; j < rn;) {
        int64_t r = r0 + j, ox = r % w->out[2], t = r / w->out[2];
        int64_t oy = t % w->out[1], oz = t / w->out[1];
        int len = rn - j < w->out[2] - ox ? rn - j : (int)(w->out[2] - ox);
        runs[nruns++] = (kp__run){.j = j,
                                  .len = len,
                                  .z = oz * w->stride[0] - w->pad[0],
                                  .y = oy * w->stride[1] - w->pad[1],
                                  .x = ox * w->stride[2] - w->pad[2]};
        j += len;
    }
    int64_t kx = k0 % w->k[2], t = k0 / w->k[2];
    int64_t ky = t % w->k[1];
    t /= w->k[1];
    int64_t kz = t % w->k[0], c = t / w->k[0];
    int64_t plane = kp__ox_win_in_size(w);
    for (int p = 0; p < kc; p++) {
        float *d = dst + (int64_t)p * width;
        const float *img = s->p + c * plane;
        for (int q = 0; q < nruns; q++) {
            const kp__run *u = &runs[q];
            int64_t iz = u->z + kz * w->dil[0], iy = u->y + ky * w->dil[1];
            if (iz < 0 || iz >= w->in[0] || iy < 0 || iy >= w->in[1])
                memset(d + u->j, 0, (size_t)u->len * sizeof(float));
            else
                kp__copy_row(img + (iz * w->in[1] + iy) * w->in[2], u->x + kx * w->dil[2], u->len,
                             w, d + u->j);
        }
        if (++kx == w->k[2]) {
            kx = 0;
            if (++ky == w->k[1]) {
                ky = 0;
                if (++kz == w->k[0]) {
                    kz = 0;
                    c++;
                }
            }
        }
    }
}

/* Packs `width` columns (rows of the source past rn are zero). */
static void kp__pack(const kp__src *s, int64_t r0, int rn, int64_t k0, int kc, int width,
                     float *dst) {
    if (s->win)
        kp__pack_win(s, r0, rn, k0, kc, width, dst);
    else
        kp__pack_strided(s, r0, rn, k0, kc, width, dst);
    if (rn < width)
        for (int p = 0; p < kc; p++)
            memset(dst + (int64_t)p * width + rn, 0, (size_t)(width - rn) * sizeof(float));
}

/* Stores a tile: the first K block sets C (adding the bias) unless the
 * product accumulates; later blocks add. */
static void kp__store(const kp__ox_gemm *g, const float *acc, float *c, const float *bias, int mr,
                      int nr, bool set) {
    for (int i = 0; i < mr; i++) {
        const float *a = acc + i * KP__NR;
        float *row = c + i * g->c_rs;
        if (set) {
            for (int j = 0; j < nr; j++) {
                float b = bias ? bias[g->bias_cols ? j : i] : 0.0f;
                row[j * g->c_cs] = g->alpha * a[j] + b;
            }
        } else if (g->c_cs == 1) {
            for (int j = 0; j < nr; j++) row[j] += g->alpha * a[j];
        } else {
            for (int j = 0; j < nr; j++) row[j * g->c_cs] += g->alpha * a[j];
        }
    }
}

/* One block: rows [m0, m0 + mlen) by columns [n0, n0 + nlen). */
static void kp__block(const kp__ox_gemm *g, const kp__src *a, const kp__src *b, float *c,
                      const float *bias, int64_t m0, int mlen, int64_t n0, int nlen) {
    _Alignas(64) float bp[KP__KC * KP__NC];
    _Alignas(64) float ap[KP__KC * KP__MR];
    _Alignas(64) float acc[KP__MR * KP__NR];
    int npanels = (nlen + KP__NR - 1) / KP__NR;
    for (int64_t k0 = 0; k0 < g->k || k0 == 0; k0 += KP__KC) {
        int kc = g->k - k0 < KP__KC ? (int)(g->k - k0) : KP__KC;
        const float *bpanels = bp;
        int64_t bstep = (int64_t)KP__NR * kc;
        if (b->packed) {
            bpanels = b->p + n0 * g->k + k0 * KP__NR;
            bstep = (int64_t)KP__NR * g->k;
        } else {
            for (int q = 0; q < npanels; q++) {
                int rn = nlen - q * KP__NR < KP__NR ? nlen - q * KP__NR : KP__NR;
                kp__pack(b, n0 + q * KP__NR, rn, k0, kc, KP__NR, bp + q * bstep);
            }
        }
        for (int i0 = 0; i0 < mlen; i0 += KP__MR) {
            int mr = mlen - i0 < KP__MR ? mlen - i0 : KP__MR;
            const float *apanel = ap;
            if (a->packed)
                apanel = a->p + (m0 + i0) * g->k + k0 * KP__MR;
            else
                kp__pack(a, m0 + i0, mr, k0, kc, KP__MR, ap);
            for (int q = 0; q < npanels; q++) {
                int nr = nlen - q * KP__NR < KP__NR ? nlen - q * KP__NR : KP__NR;
                int64_t i = m0 + i0, j = n0 + q * KP__NR;
                const float *bb = NULL;
                if (bias) bb = bias + (g->bias_cols ? j : i);
                kp__micro(kc, apanel, bpanels + q * bstep, acc);
                kp__store(g, acc, c + i * g->c_rs + j * g->c_cs, bb, mr, nr,
                          k0 == 0 && !g->accumulate);
            }
        }
    }
}

static int64_t kp__ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

uint64_t kp__ox_gemm_blocks(const kp__ox_gemm *g) {
    if (g->m <= 0 || g->n <= 0) return 0;
    return (uint64_t)g->nb[0] * (uint64_t)g->nb[1] * (uint64_t)kp__ceil_div(g->m, KP__MC) *
           (uint64_t)kp__ceil_div(g->n, KP__NC);
}

void kp__ox_gemm_run(const kp__ox_gemm *g, uint64_t first, uint64_t count) {
    int64_t mblocks = kp__ceil_div(g->m, KP__MC), nblocks = kp__ceil_div(g->n, KP__NC);
    for (uint64_t blk = first; blk < first + count; blk++) {
        int64_t t = (int64_t)blk;
        int64_t nbk = t % nblocks;
        t /= nblocks;
        int64_t mbk = t % mblocks;
        t /= mblocks;
        int64_t b1 = t % g->nb[1], b0 = t / g->nb[1];
        kp__src a = {.p = g->a + b0 * g->a_bs[0] + b1 * g->a_bs[1],
                     .rs = g->a_rs,
                     .ks = g->a_ks,
                     .win = g->a_kind == KP__OX_GEMM_WIN ? &g->win : NULL,
                     .packed = g->a_kind == KP__OX_GEMM_PACKED};
        kp__src b = {.p = g->b + b0 * g->b_bs[0] + b1 * g->b_bs[1],
                     .rs = g->b_rs,
                     .ks = g->b_ks,
                     .win = g->b_kind == KP__OX_GEMM_WIN ? &g->win : NULL,
                     .packed = g->b_kind == KP__OX_GEMM_PACKED};
        float *c = g->c + b0 * g->c_bs[0] + b1 * g->c_bs[1];
        const float *bias = g->bias ? g->bias + b1 * g->bias_bs : NULL;
        int64_t m0 = mbk * KP__MC, n0 = nbk * KP__NC;
        int mlen = (int)(g->m - m0 < KP__MC ? g->m - m0 : KP__MC);
        int nlen = (int)(g->n - n0 < KP__NC ? g->n - n0 : KP__NC);
        kp__block(g, &a, &b, c, bias, m0, mlen, n0, nlen);
    }
}

/* Padded tile area of m rows by n columns. */
static int64_t kp__padded(int64_t m, int64_t n) {
    return kp__ceil_div(m, KP__MR) * KP__MR * kp__ceil_div(n, KP__NR) * KP__NR;
}

bool kp__ox_gemm_orient(kp__ox_gemm *g) {
    if (kp__padded(g->n, g->m) >= kp__padded(g->m, g->n)) return false;
    kp__ox_gemm s = *g;
    g->m = s.n;
    g->n = s.m;
    g->a = s.b;
    g->b = s.a;
    g->a_kind = s.b_kind;
    g->b_kind = s.a_kind;
    g->a_rs = s.b_rs;
    g->a_ks = s.b_ks;
    g->b_rs = s.a_rs;
    g->b_ks = s.a_ks;
    g->c_rs = s.c_cs;
    g->c_cs = s.c_rs;
    g->bias_cols = !s.bias_cols;
    for (int i = 0; i < 2; i++) {
        g->a_bs[i] = s.b_bs[i];
        g->b_bs[i] = s.a_bs[i];
    }
    return true;
}

size_t kp__ox_gemm_packed_floats(int64_t rows, int64_t k, bool a_side) {
    int64_t w = a_side ? KP__MR : KP__NR;
    return (size_t)(kp__ceil_div(rows, w) * w * k);
}

void kp__ox_gemm_pack_side(const float *src, int64_t rs, int64_t ks, int64_t rows, int64_t k,
                           bool a_side, float *dst) {
    int w = a_side ? KP__MR : KP__NR;
    kp__src s = {.p = src, .rs = rs, .ks = ks};
    for (int64_t r0 = 0; r0 < rows; r0 += w) {
        int rn = rows - r0 < w ? (int)(rows - r0) : w;
        for (int64_t k0 = 0; k0 < k; k0 += KP__KC) {
            int kc = k - k0 < KP__KC ? (int)(k - k0) : KP__KC;
            kp__pack(&s, r0, rn, k0, kc, w, dst + r0 * k + k0 * w);
        }
    }
}

static void kp__gemm_host_kernel(const void *params, kp_dim3 grid, kp_dim3 block,
                                 uint64_t first, uint64_t n) {
    kp__ox_gemm_run(params, first, n);
}

static const kp_kernel kp__gemm_kernel = {
    "onnx_gemm", sizeof(kp__ox_gemm), {{"host", &(const kp_host_kernel){kp__gemm_host_kernel}}}};

kp_status kp__ox_gemm_host(const kp__ox_exec *x, const kp__ox_gemm *g) {
    uint64_t blocks = kp__ox_gemm_blocks(g);
    if (blocks == 0) return KP_OK;
    if (x->fold) {
        kp__ox_gemm_run(g, 0, blocks);
        return KP_OK;
    }
    kp_dim3 one = {1, 1, 1};
    return kp__ox_launch_geom(x, &kp__gemm_kernel, one, one, 0, blocks, g);
}

/* --- Gemm ------------------------------------------------------------------------- */

static kp_status kp__want_f32(const kp__ox_gnode *n, const kp__ox_value *v, const char *what) {
    if (v->dtype != KP_F32)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "%s has dtype %s; only f32 is supported",
                                 what, kp_dtype_name(v->dtype));
    return KP_OK;
}

/* The extents a product hands to 32-bit GEMM fields. */
static kp_status kp__want_dims(const kp__ox_gnode *n, int64_t m, int64_t k, int64_t nn) {
    if (!kp__ox_fits32(m) || !kp__ox_fits32(k) || !kp__ox_fits32(nn))
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED,
                                 "a %lld x %lld x %lld product is too large",
                                 (long long)m, (long long)k, (long long)nn);
    return KP_OK;
}

typedef struct kp__gemm_attrs {
    float alpha, beta;
    int64_t ta, tb;
} kp__gemm_attrs;

static kp_status kp__gemm_attrs_read(const kp__ox_gnode *n, kp__gemm_attrs *a) {
    KP_CHECK(kp__ox_attr_float(n, "alpha", 1.0f, &a->alpha));
    KP_CHECK(kp__ox_attr_float(n, "beta", 1.0f, &a->beta));
    KP_CHECK(kp__ox_attr_int(n, "transA", 0, &a->ta));
    KP_CHECK(kp__ox_attr_int(n, "transB", 0, &a->tb));
    return KP_OK;
}

kp_status kp__ox_gemm_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *a = kp__ox_in(g, n, 0), *b = kp__ox_in(g, n, 1), *c = kp__ox_in(g, n, 2);
    kp__gemm_attrs at;
    if (!a || !b) return kp__ox_node_error(n, KP_ERR_PARSE, "needs inputs A and B");
    KP_CHECK(kp__gemm_attrs_read(n, &at));
    KP_CHECK(kp__want_f32(n, a, "A"));
    KP_CHECK(kp__want_f32(n, b, "B"));
    if (a->ndim != 2 || b->ndim != 2)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "A and B must be matrices (ranks %d, %d)",
                                 a->ndim, b->ndim);
    int64_t m = at.ta ? a->shape[1] : a->shape[0], k = at.ta ? a->shape[0] : a->shape[1];
    int64_t kb = at.tb ? b->shape[1] : b->shape[0], nn = at.tb ? b->shape[0] : b->shape[1];
    if (k != kb)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "inner extents differ: %lld and %lld",
                                 (long long)k, (long long)kb);
    KP_CHECK(kp__want_dims(n, m, k, nn));
    if (c) {
        KP_CHECK(kp__want_f32(n, c, "C"));
        int64_t cm = c->ndim == 2 ? c->shape[0] : 1, cn = c->ndim >= 1 ? c->shape[c->ndim - 1] : 1;
        if (c->ndim > 2 || (cm != 1 && cm != m) || (cn != 1 && cn != nn))
            return kp__ox_node_error(n, KP_ERR_MISMATCH, "C does not broadcast to %lld x %lld",
                                     (long long)m, (long long)nn);
    }
    int64_t shape[2] = {m, nn};
    return kp__ox_set_out(g, n, 0, KP_F32, 2, shape);
}

/* Y = beta * C broadcast, before the product adds to it. */
static kp_status kp__gemm_fill_c(const kp__ox_exec *x, const kp__ox_value *c, float beta,
                                 float *y, int64_t m, int64_t nn) {
    int64_t cm = c->ndim == 2 ? c->shape[0] : 1, cn = c->ndim >= 1 ? c->shape[c->ndim - 1] : 1;
    kp__ox_fill_params p = {.c = c->data,
                            .y = y,
                            .n = m * nn,
                            .cols = nn,
                            .c_rs = cm == 1 ? 0 : cn,
                            .c_cs = cn == 1 ? 0 : 1,
                            .beta = beta};
    return kp__ox_launch(x, &kp__ox_k_fill, (uint64_t)(m * nn), &p);
}

kp_status kp__ox_gemm_op_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *a = kp__ox_in(g, n, 0), *b = kp__ox_in(g, n, 1), *c = kp__ox_in(g, n, 2);
    kp__ox_value *y = kp__ox_out(g, n, 0);
    kp__gemm_attrs at;
    KP_CHECK(kp__gemm_attrs_read(n, &at));
    int64_t m = y->shape[0], nn = y->shape[1], k = at.ta ? a->shape[0] : a->shape[1];
    bool add_c = c && at.beta != 0.0f && c->numel > 0;
    if (m == 0 || nn == 0) return KP_OK;
    if (add_c) KP_CHECK(kp__gemm_fill_c(x, c, at.beta, y->data, m, nn));
    if (!x->host) {
#ifdef KP_HAVE_CUDA
        kp__ox_blas p = {.ta = at.ta != 0, .tb = at.tb != 0, .m = m, .n = nn, .k = k, .batch = 1,
                         .alpha = at.alpha, .beta = add_c ? 1.0f : 0.0f, .a = a->data,
                         .b = b->data, .c = y->data, .lda = a->shape[1], .ldb = b->shape[1],
                         .ldc = nn};
        return kp__ox_blas_gemm(x, &p);
#else
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "no device GEMM in this build");
#endif
    }
    kp__ox_gemm p = {.m = (int32_t)m, .n = (int32_t)nn, .k = (int32_t)k, .nb = {1, 1},
                     .accumulate = add_c, .alpha = at.alpha, .a = a->data, .b = b->data,
                     .c = y->data, .a_rs = at.ta ? 1 : k, .a_ks = at.ta ? m : 1,
                     .b_rs = at.tb ? k : 1, .b_ks = at.tb ? 1 : nn, .c_rs = nn, .c_cs = 1};
    kp__ox_gemm_orient(&p);
    return kp__ox_gemm_host(x, &p);
}

kp_status kp__ox_blas_prepare(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n,
                              size_t *workspace) {
    if (!x->host && *workspace < KP__OX_BLAS_RESERVE) *workspace = KP__OX_BLAS_RESERVE;
    return KP_OK;
}

/* --- MatMul ------------------------------------------------------------------------ */

/* A MatMul's operands as matrices: a 1-D operand is a row (A) or a column
 * (B) vector; leading dimensions are batch dimensions, broadcast. */
typedef struct kp__mm {
    int64_t m, k, n;
    int nbatch;                    /* batch levels after merging */
    int64_t size[KP_MAX_DIMS];     /* extent of each level */
    int64_t sa[KP_MAX_DIMS], sb[KP_MAX_DIMS], sc[KP_MAX_DIMS];
} kp__mm;

/* Batch extents of a rank-r operand's leading r-2 dimensions, right-aligned
 * to `nb` levels; a broadcast level gets stride 0. */
static void kp__mm_strides(const kp__ox_value *v, int vb, int nb, int64_t mat, const int64_t *out,
                           int64_t *s) {
    int64_t st = mat;
    for (int i = nb - 1; i >= 0; i--) {
        int vi = i - (nb - vb);
        int64_t ext = vi >= 0 ? v->shape[vi] : 1;
        s[i] = ext == 1 ? 0 : st;
        st *= ext;
    }
}

static kp_status kp__mm_plan(const kp__ox_gnode *n, const kp__ox_value *a, const kp__ox_value *b,
                             kp__mm *p, int *ondim, int64_t *oshape) {
    int ra = a->ndim, rb = b->ndim;
    if (ra < 1 || rb < 1) return kp__ox_node_error(n, KP_ERR_MISMATCH, "MatMul of a scalar");
    p->m = ra >= 2 ? a->shape[ra - 2] : 1;
    p->k = a->shape[ra - 1];
    int64_t kb = rb >= 2 ? b->shape[rb - 2] : b->shape[0];
    p->n = rb >= 2 ? b->shape[rb - 1] : 1;
    if (p->k != kb)
        return kp__ox_node_error(n, KP_ERR_MISMATCH, "inner extents differ: %lld and %lld",
                                 (long long)p->k, (long long)kb);
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0, nb;
    int64_t bshape[KP_MAX_DIMS];
    KP_CHECK(kp__ox_broadcast(n, ba, a->shape, bb, b->shape, &nb, bshape));
    int64_t sa[KP_MAX_DIMS], sb[KP_MAX_DIMS];
    kp__mm_strides(a, ba, nb, p->m * p->k, bshape, sa);
    kp__mm_strides(b, bb, nb, p->k * p->n, bshape, sb);
    /* Output shape: batch, then m unless A was a vector, n unless B was. */
    int r = 0;
    for (int i = 0; i < nb; i++) oshape[r++] = bshape[i];
    if (ra >= 2) oshape[r++] = p->m;
    if (rb >= 2) oshape[r++] = p->n;
    *ondim = r;
    /* Batch levels, innermost first: extents of one dropped, a level joined
     * to the one inside it when every operand steps through both as one. */
    p->nbatch = 0;
    int64_t cstride = p->m * p->n;
    for (int i = nb - 1; i >= 0; i--) {
        if (bshape[i] == 1) continue;
        int l = p->nbatch;
        if (l > 0 && sa[i] == p->sa[l - 1] * p->size[l - 1] &&
            sb[i] == p->sb[l - 1] * p->size[l - 1]) {
            p->size[l - 1] *= bshape[i];
        } else {
            p->size[l] = bshape[i];
            p->sa[l] = sa[i];
            p->sb[l] = sb[i];
            p->sc[l] = cstride;
            p->nbatch++;
        }
        cstride *= bshape[i];
    }
    /* B shared by every batch entry of a contiguous A: one taller product. */
    if (p->nbatch == 1 && p->sb[0] == 0 && p->sa[0] == p->m * p->k) {
        p->m *= p->size[0];
        p->nbatch = 0;
    }
    return KP_OK;
}

kp_status kp__ox_matmul_infer(kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *a = kp__ox_in(g, n, 0), *b = kp__ox_in(g, n, 1);
    if (!a || !b) return kp__ox_node_error(n, KP_ERR_PARSE, "needs inputs A and B");
    KP_CHECK(kp__want_f32(n, a, "A"));
    KP_CHECK(kp__want_f32(n, b, "B"));
    kp__mm p;
    int ndim;
    int64_t shape[KP_MAX_DIMS + 2];
    if (a->ndim > KP_MAX_DIMS || b->ndim > KP_MAX_DIMS)
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "rank over %d", KP_MAX_DIMS);
    KP_CHECK(kp__mm_plan(n, a, b, &p, &ndim, shape));
    KP_CHECK(kp__want_dims(n, p.m, p.k, p.n));
    for (int i = 0; i < p.nbatch; i++)
        if (!kp__ox_fits32(p.size[i]))
            return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "a batch of %lld is too large",
                                     (long long)p.size[i]);
    return kp__ox_set_out(g, n, 0, KP_F32, ndim, shape);
}

/* The offsets of outer batch entry t over levels [first, nbatch). */
static void kp__mm_outer(const kp__mm *p, int first, int64_t t, int64_t *oa, int64_t *ob,
                         int64_t *oc) {
    *oa = *ob = *oc = 0;
    for (int l = first; l < p->nbatch; l++) {
        int64_t i = t % p->size[l];
        t /= p->size[l];
        *oa += i * p->sa[l];
        *ob += i * p->sb[l];
        *oc += i * p->sc[l];
    }
}

static int64_t kp__mm_count(const kp__mm *p, int first) {
    int64_t c = 1;
    for (int l = first; l < p->nbatch; l++) c *= p->size[l];
    return c;
}

static kp_status kp__mm_host(const kp__ox_exec *x, const kp__mm *p, const float *a,
                             const float *b, float *c) {
    kp__ox_gemm q = {.m = (int32_t)p->m, .n = (int32_t)p->n, .k = (int32_t)p->k,
                     .nb = {p->nbatch > 1 ? (int32_t)p->size[1] : 1,
                            p->nbatch > 0 ? (int32_t)p->size[0] : 1},
                     .alpha = 1.0f, .a_rs = p->k, .a_ks = 1, .b_rs = 1, .b_ks = p->n,
                     .c_rs = p->n, .c_cs = 1,
                     .a_bs = {p->nbatch > 1 ? p->sa[1] : 0, p->nbatch > 0 ? p->sa[0] : 0},
                     .b_bs = {p->nbatch > 1 ? p->sb[1] : 0, p->nbatch > 0 ? p->sb[0] : 0},
                     .c_bs = {p->nbatch > 1 ? p->sc[1] : 0, p->nbatch > 0 ? p->sc[0] : 0}};
    int64_t outer = kp__mm_count(p, 2);
    for (int64_t t = 0; t < outer; t++) {
        int64_t oa, ob, oc;
        kp__mm_outer(p, 2, t, &oa, &ob, &oc);
        kp__ox_gemm r = q;
        r.a = a + oa;
        r.b = b + ob;
        r.c = c + oc;
        kp__ox_gemm_orient(&r);
        KP_CHECK(kp__ox_gemm_host(x, &r));
    }
    return KP_OK;
}

#ifdef KP_HAVE_CUDA
static kp_status kp__mm_device(const kp__ox_exec *x, const kp__mm *p, const float *a,
                               const float *b, float *c) {
    int64_t outer = kp__mm_count(p, 1);
    for (int64_t t = 0; t < outer; t++) {
        int64_t oa, ob, oc;
        kp__mm_outer(p, 1, t, &oa, &ob, &oc);
        kp__ox_blas q = {.m = p->m, .n = p->n, .k = p->k,
                         .batch = p->nbatch > 0 ? p->size[0] : 1, .alpha = 1.0f, .beta = 0.0f,
                         .a = a + oa, .b = b + ob, .c = c + oc, .lda = p->k, .ldb = p->n,
                         .ldc = p->n, .sa = p->nbatch > 0 ? p->sa[0] : 0,
                         .sb = p->nbatch > 0 ? p->sb[0] : 0, .sc = p->nbatch > 0 ? p->sc[0] : 0};
        KP_CHECK(kp__ox_blas_gemm(x, &q));
    }
    return KP_OK;
}
#endif

kp_status kp__ox_matmul_run(const kp__ox_exec *x, kp__ox_graph *g, kp__ox_gnode *n) {
    kp__ox_value *a = kp__ox_in(g, n, 0), *b = kp__ox_in(g, n, 1), *y = kp__ox_out(g, n, 0);
    kp__mm p;
    int ndim;
    int64_t shape[KP_MAX_DIMS + 2];
    KP_CHECK(kp__mm_plan(n, a, b, &p, &ndim, shape));
    if (y->numel == 0) return KP_OK;
    if (!x->host) {
#ifdef KP_HAVE_CUDA
        return kp__mm_device(x, &p, a->data, b->data, y->data);
#else
        return kp__ox_node_error(n, KP_ERR_UNSUPPORTED, "no device GEMM in this build");
#endif
    }
    return kp__mm_host(x, &p, a->data, b->data, y->data);
}
