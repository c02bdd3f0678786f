/* Host-side matrices and residuals for the Cholesky example and its test. */
#include <math.h>
#include <stdint.h>

#include "tiles.h"

static uint64_t next_rand(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float unit(uint64_t *s) {
    return (float)((double)(next_rand(s) >> 11) / 9007199254740992.0) * 2 - 1;
}

void chol_make_spd(int64_t n, uint64_t seed, float *a) {
    for (int64_t c = 0; c < n; c++)
        for (int64_t r = c; r < n; r++) {
            float v = r == c ? (float)n + 1 + unit(&seed) : unit(&seed);
            a[r + c * n] = v;
            a[c + r * n] = v;
        }
}

/* (A - L L^T) x for one vector, L the lower triangle of l; into y. */
static void residual_apply(int64_t n, const float *a, const float *l, const double *x, double *t,
                           double *y) {
    for (int64_t c = 0; c < n; c++) { /* t = L^T x */
        double s = 0;
        for (int64_t r = c; r < n; r++) s += (double)l[r + c * n] * x[r];
        t[c] = s;
    }
    for (int64_t r = 0; r < n; r++) y[r] = 0;
    for (int64_t c = 0; c < n; c++) /* y = A x - L t */
        for (int64_t r = 0; r < n; r++) {
            y[r] += (double)a[r + c * n] * x[c];
            if (r >= c) y[r] -= (double)l[r + c * n] * t[c];
        }
}

double chol_residual(int64_t n, const float *a, const float *l, int probes, double *scratch) {
    double an = 0;
    for (int64_t i = 0; i < n * n; i++) an += (double)a[i] * a[i];
    double *x = scratch, *t = x + n, *y = t + n, rn = 0;
    if (probes <= 0) { /* exact: the columns of the identity */
        for (int64_t j = 0; j < n; j++) {
            for (int64_t r = 0; r < n; r++) x[r] = r == j;
            residual_apply(n, a, l, x, t, y);
            for (int64_t r = 0; r < n; r++) rn += y[r] * y[r];
        }
    } else { /* E ||M x||^2 = ||M||_F^2 for x of independent +-1 entries */
        uint64_t seed = 7;
        for (int p = 0; p < probes; p++) {
            for (int64_t r = 0; r < n; r++) x[r] = next_rand(&seed) & 1 ? 1.0 : -1.0;
            residual_apply(n, a, l, x, t, y);
            for (int64_t r = 0; r < n; r++) rn += y[r] * y[r] / probes;
        }
    }
    return sqrt(rn / an);
}
