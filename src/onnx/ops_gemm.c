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

#define KP__MR KP__OX_GEMM_MR
#define KP__NR KP__OX_GEMM_NR
#define KP__KC 256
#define KP__NC (4 * KP__NR)
#define KP__MC 256

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
#define KP__CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KP__CLONES
#endif

/* acc = A panel (kc x MR) times B panel (kc x NR), both packed k-major. */
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

static void kp__copy_row(const float *row, int64_t ix, int len, const kp__ox_win *w, float *d) {
    int64_t s = w->stride[2], n = w->in[2];
    if (s == 1 && ix >= 0 && ix + len <= n) {
        memcpy(d, row + ix, (size_t)len * sizeof(float));
        return;
    }
    for (int q = 0; q < len; q++, ix += s) d[q] = ix >= 0 && ix < n ? row[ix] : 0.0f;
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

void kp__ox_gemm_orient(kp__ox_gemm *g) {
    if (kp__padded(g->n, g->m) >= kp__padded(g->m, g->n)) return;
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
