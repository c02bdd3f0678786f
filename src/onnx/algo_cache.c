/* The convolution algorithms an engine chose, kept in a file the next run
 * reads, so no run pays twice for cuDNN's heuristics or its measurements
 * ("tune"). One file per model, GPU and cuDNN version:
 *
 *   DIR/conv-<model digest>-<gpu digest>.algos
 *
 *   kpipe algorithms 1
 *   model 8c1f0a2e4b7d9f31
 *   device NVIDIA H100 80GB HBM3, sm_90, cuDNN 91900
 *   fwd half fused heur n1 c64 k64 g1 i1080x1920 o1080x1920 r3x3 s1x1 p1x1 d1x1<TAB>1 1 0
 *
 * Each line after the header is a convolution's key (everything cuDNN's
 * choice depends on, built by ops_cudnn.c), a tab, then the algorithm, the
 * math type and the workspace bytes. A file whose header names another
 * model or device, or that does not parse, is ignored whole (and rewritten
 * at the next save); an entry cuDNN no longer accepts is chosen again.
 * Writes go through a temporary file and a rename, so a reader never sees
 * half a file; a file that cannot be written costs the next run its choice,
 * nothing more. Setup-time host work only: nothing here runs per tick. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx-impl.h"

#define KP__ALGO_MAGIC "kpipe algorithms 1"
#define KP__ALGO_MAX_ENTRIES 4096
#define KP__ALGO_MAX_FILE ((size_t)1 << 20)

typedef struct {
    char key[KP__OX_ALGO_KEY];
    kp__ox_algo a;
    bool loaded; /* read from the file */
    bool used;   /* looked up since */
} kp__algo_entry;

struct kp__ox_algo_cache {
    char *path;           /* NULL: in memory only (the fuzz harness, tests) */
    uint64_t model;
    char device[KP__OX_ALGO_KEY];
    kp__algo_entry *e;
    size_t n, cap;
    bool dirty;
};

static uint64_t kp__algo_fnv(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* A key or device text must be one line of printable ASCII, no tab. */
static bool kp__algo_text_ok(const char *s, size_t len) {
    if (len == 0 || len >= KP__OX_ALGO_KEY) return false;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return false;
    return true;
}

static kp__algo_entry *kp__algo_find(const kp__ox_algo_cache *c, const char *key) {
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->e[i].key, key) == 0) return &c->e[i];
    return NULL;
}

static kp_status kp__algo_add(kp__ox_algo_cache *c, const char *key, size_t len,
                              const kp__ox_algo *a) {
    if (c->n == c->cap) {
        if (c->cap >= KP__ALGO_MAX_ENTRIES)
            return kp__error(KP_ERR_PARSE, "algorithm cache: more than %d entries",
                             KP__ALGO_MAX_ENTRIES);
        size_t cap = c->cap ? c->cap * 2 : 32;
        kp__algo_entry *e = kp__calloc(cap, sizeof *e);
        if (!e) return kp__error(KP_ERR_OUT_OF_MEMORY, "algorithm cache: no memory");
        if (c->n) memcpy(e, c->e, c->n * sizeof *e);
        kp__free(c->e);
        c->e = e;
        c->cap = cap;
    }
    memcpy(c->e[c->n].key, key, len);
    c->e[c->n].key[len] = '\0';
    c->e[c->n].a = *a;
    c->e[c->n].loaded = c->e[c->n].used = false;
    c->n++;
    return KP_OK;
}

/* One line, without its newline: [s, s + len). */
static kp_status kp__algo_line(kp__ox_algo_cache *c, const char *s, size_t len, size_t lineno) {
    const char *tab = memchr(s, '\t', len);
    if (!tab || !kp__algo_text_ok(s, (size_t)(tab - s)))
        return kp__error(KP_ERR_PARSE, "algorithm cache line %zu: not KEY<TAB>ALGO MATH BYTES",
                         lineno);
    char val[64];
    size_t vlen = len - (size_t)(tab + 1 - s);
    if (vlen == 0 || vlen >= sizeof val)
        return kp__error(KP_ERR_PARSE, "algorithm cache line %zu: no values", lineno);
    memcpy(val, tab + 1, vlen);
    val[vlen] = '\0';
    int algo, math, used = 0;
    unsigned long long ws;
    if (sscanf(val, "%d %d %llu%n", &algo, &math, &ws, &used) != 3 || used != (int)vlen ||
        algo < 0 || algo > 64 || math < 0 || math > 8 || val[0] == '-' ||
        strchr(val, '-') != NULL || ws > (unsigned long long)KP__MAX_ALLOC_BYTES)
        return kp__error(KP_ERR_PARSE, "algorithm cache line %zu: bad values \"%s\"", lineno,
                         val);
    char key[KP__OX_ALGO_KEY];
    memcpy(key, s, (size_t)(tab - s));
    key[tab - s] = '\0';
    if (kp__algo_find(c, key))
        return kp__error(KP_ERR_PARSE, "algorithm cache line %zu: a second entry for one key",
                         lineno);
    kp__ox_algo a = {.algo = algo, .math = math, .ws = (uint64_t)ws};
    return kp__algo_add(c, key, (size_t)(tab - s), &a);
}

/* The header's three lines must name this model and device exactly. */
static kp_status kp__algo_header(const kp__ox_algo_cache *c, const char **p, const char *end) {
    char want[3][KP__OX_ALGO_KEY + 16];
    snprintf(want[0], sizeof want[0], "%s", KP__ALGO_MAGIC);
    snprintf(want[1], sizeof want[1], "model %016llx", (unsigned long long)c->model);
    snprintf(want[2], sizeof want[2], "device %s", c->device);
    for (int i = 0; i < 3; i++) {
        const char *nl = memchr(*p, '\n', (size_t)(end - *p));
        size_t len = nl ? (size_t)(nl - *p) : (size_t)(end - *p);
        if (!nl || len != strlen(want[i]) || memcmp(*p, want[i], len) != 0)
            return kp__error(KP_ERR_PARSE, "algorithm cache: header line %d is not \"%s\"", i + 1,
                             want[i]);
        *p = nl + 1;
    }
    return KP_OK;
}

kp_status kp__ox_algo_cache_parse(kp__ox_algo_cache *c, const char *text, size_t len) {
    if (!c || (!text && len)) return kp__error(KP_ERR_INVALID_ARG, "algorithm cache: no text");
    if (len > KP__ALGO_MAX_FILE)
        return kp__error(KP_ERR_PARSE, "algorithm cache: %zu bytes, over %zu", len,
                         KP__ALGO_MAX_FILE);
    const char *p = text, *end = text + len;
    size_t was = c->n;
    kp_status st = kp__algo_header(c, &p, end);
    for (size_t lineno = 4; st == KP_OK && p < end; lineno++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) {
            st = kp__error(KP_ERR_PARSE, "algorithm cache line %zu: no newline (cut short?)",
                           lineno);
            break;
        }
        st = kp__algo_line(c, p, (size_t)(nl - p), lineno);
        p = nl + 1;
    }
    if (st != KP_OK) c->n = was; /* a refused text adds nothing */
    for (size_t i = was; i < c->n; i++) c->e[i].loaded = true;
    return st;
}

kp_status kp__ox_algo_cache_create(const char *dir, uint64_t model, const char *device,
                                   kp__ox_algo_cache **out) {
    if (!out || !device) return kp__error(KP_ERR_INVALID_ARG, "algorithm cache: NULL argument");
    *out = NULL;
    size_t dl = strlen(device);
    if (!kp__algo_text_ok(device, dl) || strchr(device, '\t'))
        return kp__error(KP_ERR_INVALID_ARG, "algorithm cache: a device name of %zu bytes", dl);
    kp__ox_algo_cache *c = kp__calloc(1, sizeof *c);
    if (!c) return kp__error(KP_ERR_OUT_OF_MEMORY, "algorithm cache: no memory");
    c->model = model;
    memcpy(c->device, device, dl + 1);
    if (dir && *dir) {
        size_t len = strlen(dir) + 64;
        c->path = kp__malloc(len);
        if (!c->path) {
            kp__free(c);
            return kp__error(KP_ERR_OUT_OF_MEMORY, "algorithm cache: no memory");
        }
        snprintf(c->path, len, "%s/conv-%016llx-%016llx.algos", dir, (unsigned long long)model,
                 (unsigned long long)kp__algo_fnv(device));
    }
    *out = c;
    return KP_OK;
}

void kp__ox_algo_cache_load(kp__ox_algo_cache *c) {
    if (!c || !c->path) return;
    FILE *f = fopen(c->path, "rb");
    if (!f) return; /* the first run: nothing chosen yet */
    char *buf = kp__malloc(KP__ALGO_MAX_FILE + 1);
    size_t n = buf ? fread(buf, 1, KP__ALGO_MAX_FILE + 1, f) : 0;
    fclose(f);
    if (buf && kp__ox_algo_cache_parse(c, buf, n) != KP_OK) {
        kp__log(KP_LOG_INFO, "%s: ignored (%s); choosing again", c->path, kp_last_error());
        kp_clear_error();
        c->dirty = true; /* rewrite it whole at the next save */
    }
    kp__free(buf);
}

bool kp__ox_algo_cache_get(kp__ox_algo_cache *c, const char *key, kp__ox_algo *out) {
    kp__algo_entry *e = c ? kp__algo_find(c, key) : NULL;
    if (!e) return false;
    e->used = true;
    *out = e->a;
    return true;
}

kp_status kp__ox_algo_cache_put(kp__ox_algo_cache *c, const char *key, const kp__ox_algo *a) {
    if (!c) return KP_OK;
    size_t len = strlen(key);
    if (!kp__algo_text_ok(key, len) || strchr(key, '\t'))
        return kp__error(KP_ERR_INTERNAL, "algorithm cache: a key of %zu bytes", len);
    kp__algo_entry *e = kp__algo_find(c, key);
    if (e && e->a.algo == a->algo && e->a.math == a->math && e->a.ws == a->ws) return KP_OK;
    c->dirty = true;
    if (e) { /* chosen again: cuDNN refused what the file held */
        e->a = *a;
        e->loaded = false;
        return KP_OK;
    }
    return kp__algo_add(c, key, len, a);
}

/* mkdir -p for the cache's folder; errors show when the file is written. */
static void kp__algo_mkdirs(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return;
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf) return;
    *slash = '\0';
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            (void)mkdir(buf, 0755);
            *p = '/';
        }
    (void)mkdir(buf, 0755);
}

void kp__ox_algo_cache_save(kp__ox_algo_cache *c) {
    if (!c || !c->path || !c->dirty) return;
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", c->path, (long)getpid()) >= (int)sizeof tmp)
        return;
    kp__algo_mkdirs(c->path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        kp__log(KP_LOG_WARN, "algorithm cache: cannot write %s: %s", tmp, strerror(errno));
        return;
    }
    bool ok = fprintf(f, "%s\nmodel %016llx\ndevice %s\n", KP__ALGO_MAGIC,
                      (unsigned long long)c->model, c->device) > 0;
    for (size_t i = 0; ok && i < c->n; i++)
        ok = fprintf(f, "%s\t%d %d %llu\n", c->e[i].key, c->e[i].a.algo, c->e[i].a.math,
                     (unsigned long long)c->e[i].a.ws) > 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, c->path) != 0) {
        kp__log(KP_LOG_WARN, "algorithm cache: cannot write %s", c->path);
        (void)unlink(tmp);
        return;
    }
    c->dirty = false;
}

void kp__ox_algo_cache_stats(const kp__ox_algo_cache *c, const char **path, size_t *found,
                             size_t *chosen) {
    *path = c && c->path ? c->path : NULL;
    *found = *chosen = 0;
    for (size_t i = 0; c && i < c->n; i++) {
        if (c->e[i].loaded && c->e[i].used) ++*found;
        if (!c->e[i].loaded) ++*chosen;
    }
}

void kp__ox_algo_cache_free(kp__ox_algo_cache *c) {
    if (!c) return;
    kp__free(c->path);
    kp__free(c->e);
    kp__free(c);
}
