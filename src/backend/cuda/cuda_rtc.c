/* Run-time compilation for the cuda device: NVRTC compiles CUDA C++ to a
 * cubin for the device's architecture, the runtime loads it as a library
 * (cudaLibraryLoadData: loaded into every context, so one handle serves all
 * devices), and the kernel handle (cudaKernel_t) is what launches and
 * graph kernel nodes take as their function.
 *
 * Compiled code is cached for the process in memory, keyed by the whole
 * source, the entry and the architecture (a hash finds the candidates; the
 * full text decides), and optionally on disk under KP_KERNEL_CACHE_DIR,
 * one file per kernel holding its source and cubin, so a hash collision
 * or a stale file is never loaded. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda-impl.h"

#define KP__RTC_MAX 1024
#define KP__RTC_MAGIC "kpipe-rtc 1\n"

typedef struct kp__rtc_entry {
    uint64_t hash;
    char arch[16];
    char entry[64];
    char *source;
    cudaLibrary_t lib;
    cudaKernel_t kernel;
} kp__rtc_entry;

static pthread_mutex_t kp__rtc_mu = PTHREAD_MUTEX_INITIALIZER;
static kp__rtc_entry kp__rtc_cache[KP__RTC_MAX];
static size_t kp__rtc_n;

static uint64_t kp__rtc_hash(const char *arch, const char *entry, const char *source) {
    uint64_t h = 1469598103934665603ull;
    const char *parts[3] = {arch, entry, source};
    for (int k = 0; k < 3; k++) {
        for (const unsigned char *c = (const unsigned char *)parts[k]; *c; c++)
            h = (h ^ *c) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull; /* separator */
    }
    return h;
}

static double kp__rtc_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The compiler's first error, and the source line it names, as the detail
 * of a KP_ERR_PARSE: "kpipe_rtc.cu(42): error: ... | line 42: y = a +* b;". */
static kp_status kp__rtc_compile_error(nvrtcProgram prog, const char *source) {
    size_t n = 0;
    char *log = NULL;
    if (nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n > 1 && (log = kp__malloc(n)) &&
        nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS)
        log[0] = 0;
    const char *err = log ? strstr(log, "error") : NULL;
    const char *start = err;
    while (start && start > log && start[-1] != '\n') start--;
    int line = 0;
    const char *paren = start ? strchr(start, '(') : NULL;
    if (paren && paren < err) line = atoi(paren + 1);
    int err_len = 0;
    if (start) err_len = (int)strcspn(start, "\n");
    const char *text = source;
    for (int l = 1; text && l < line; l++) {
        text = strchr(text, '\n');
        if (text) text++;
    }
    while (text && (*text == ' ' || *text == '\t')) text++;
    int text_len = text && line > 0 ? (int)strcspn(text, "\n") : 0;
    kp_status st;
    if (!start)
        st = kp__error(KP_ERR_PARSE, "NVRTC could not compile the source (no log)");
    else if (text_len)
        st = kp__error(KP_ERR_PARSE, "NVRTC: %.*s; generated line %d: %.*s", err_len, start, line,
                       text_len, text);
    else
        st = kp__error(KP_ERR_PARSE, "NVRTC: %.*s", err_len, start);
    kp__free(log);
    return st;
}

#define KP__NVRTC_CHECK(call)                                                        \
    do {                                                                             \
        nvrtcResult kp__r = (call);                                                  \
        if (kp__r != NVRTC_SUCCESS) {                                                \
            st = kp__error(kp__r == NVRTC_ERROR_OUT_OF_MEMORY ? KP_ERR_OUT_OF_MEMORY \
                                                              : KP_ERR_DEVICE,       \
                           "%s failed: %s", #call, nvrtcGetErrorString(kp__r));      \
            goto out;                                                                \
        }                                                                            \
    } while (0)

/* Compiles to a cubin (kp__malloc'd into *cubin) for `arch`. */
static kp_status kp__rtc_nvrtc(const char *arch, const char *source, char **cubin, size_t *bytes,
                               double *ms) {
    nvrtcProgram prog = NULL;
    kp_status st = KP_OK;
    char arch_opt[48];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", arch);
    const char *opts[] = {arch_opt, "-fmad=false", "--std=c++17"};
    *cubin = NULL;
    *bytes = 0;
    KP__NVRTC_CHECK(nvrtcCreateProgram(&prog, source, "kpipe_rtc.cu", 0, NULL, NULL));
    double t0 = kp__rtc_now_ms();
    nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
    *ms = kp__rtc_now_ms() - t0;
    if (r == NVRTC_ERROR_COMPILATION) {
        st = kp__rtc_compile_error(prog, source);
        goto out;
    }
    if (r == NVRTC_ERROR_INVALID_OPTION) {
        st = kp__error(KP_ERR_UNSUPPORTED, "NVRTC %s does not compile for %s",
                       nvrtcGetErrorString(r), arch);
        goto out;
    }
    KP__NVRTC_CHECK(r);
    KP__NVRTC_CHECK(nvrtcGetCUBINSize(prog, bytes));
    if (!(*cubin = kp__malloc(*bytes ? *bytes : 1))) {
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "NVRTC: no memory for a cubin of %zu bytes", *bytes);
        goto out;
    }
    KP__NVRTC_CHECK(nvrtcGetCUBIN(prog, *cubin));
out:
    if (prog) (void)nvrtcDestroyProgram(&prog);
    if (st != KP_OK) {
        kp__free(*cubin);
        *cubin = NULL;
    }
    return st;
}

kp_status kp_rtc_check(const char *arch, const char *source, kp_rtc_info *info) {
    KP_API_ENTRY();
    KP_CHECK(kp__rtc_args(source, info));
    if (!arch || strncmp(arch, "sm_", 3) != 0 || strlen(arch) > 8 || !arch[3] ||
        strspn(arch + 3, "0123456789") != strlen(arch + 3))
        return kp__error(KP_ERR_INVALID_ARG, "arch \"%s\" is not of the form sm_NN",
                         arch ? arch : "(null)");
    char *cubin;
    size_t bytes;
    double ms = 0;
    kp_status st = kp__rtc_nvrtc(arch, source, &cubin, &bytes, &ms);
    kp__free(cubin);
    if (info) {
        info->compile_ms = ms;
        snprintf(info->arch, sizeof info->arch, "%s", arch);
    }
    return st;
}

/* --- the cache directory ------------------------------------------------------------ */
static bool kp__rtc_path(char *path, size_t len, uint64_t hash, const char *arch) {
    const char *dir = getenv("KP_KERNEL_CACHE_DIR");
    if (!dir || !*dir) return false;
    int n = snprintf(path, len, "%s/%016llx-%s.kpk", dir, (unsigned long long)hash, arch);
    return n > 0 && (size_t)n < len;
}

/* A file's cubin when it holds exactly this arch, entry and source. */
static char *kp__rtc_disk_read(const char *path, const char *arch, const char *entry,
                               const char *source, size_t *bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char head[sizeof KP__RTC_MAGIC + 96] = "", want[sizeof head];
    snprintf(want, sizeof want, "%s%s %s\n", KP__RTC_MAGIC, arch, entry);
    size_t wl = strlen(want), sl = strlen(source);
    uint64_t src_len = 0, bin_len = 0;
    char *src = NULL, *bin = NULL;
    bool ok = fread(head, 1, wl, f) == wl && memcmp(head, want, wl) == 0 &&
              fread(&src_len, sizeof src_len, 1, f) == 1 && src_len == sl &&
              (src = kp__malloc(sl + 1)) && fread(src, 1, sl, f) == sl &&
              memcmp(src, source, sl) == 0 && fread(&bin_len, sizeof bin_len, 1, f) == 1 &&
              bin_len > 0 && bin_len < (64u << 20) && (bin = kp__malloc((size_t)bin_len)) &&
              fread(bin, 1, (size_t)bin_len, f) == bin_len;
    fclose(f);
    kp__free(src);
    if (!ok) {
        kp__free(bin);
        return NULL;
    }
    *bytes = (size_t)bin_len;
    return bin;
}

/* Writes through a temporary file and a rename, so a reader never sees half
 * a file; a failure only costs the next process a compile. */
static void kp__rtc_disk_write(const char *path, const char *arch, const char *entry,
                               const char *source, const char *bin, size_t bytes) {
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp) return;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        kp__log(KP_LOG_WARN, "kernel cache: cannot write %s: %s", tmp, strerror(errno));
        return;
    }
    uint64_t sl = strlen(source), bl = bytes;
    bool ok = fprintf(f, "%s%s %s\n", KP__RTC_MAGIC, arch, entry) > 0 &&
              fwrite(&sl, sizeof sl, 1, f) == 1 && fwrite(source, 1, sl, f) == sl &&
              fwrite(&bl, sizeof bl, 1, f) == 1 && fwrite(bin, 1, bytes, f) == bytes;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        kp__log(KP_LOG_WARN, "kernel cache: cannot write %s", path);
        (void)unlink(tmp);
    }
}

/* --- compile and load ------------------------------------------------------------------- */
static kp_status kp__rtc_arch(const kp__cuda_device *d, char *arch, size_t len) {
    int major = 0, minor = 0;
    KP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d->ordinal));
    KP_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d->ordinal));
    snprintf(arch, len, "sm_%d%d", major, minor);
    return KP_OK;
}

static kp__rtc_entry *kp__rtc_find(uint64_t h, const char *arch, const char *entry,
                                   const char *source) {
    for (size_t i = 0; i < kp__rtc_n; i++) {
        kp__rtc_entry *e = &kp__rtc_cache[i];
        if (e->hash == h && strcmp(e->arch, arch) == 0 && strcmp(e->entry, entry) == 0 &&
            strcmp(e->source, source) == 0)
            return e;
    }
    return NULL;
}

kp_status kp__cuda_rtc_compile(void *ctx, const char *source, const char *entry,
                               kp_device_kernel *out, kp_rtc_info *info) {
    kp_rtc_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    KP_CHECK(kp__cuda_enter(ctx));
    KP_CHECK(kp__rtc_arch(ctx, info->arch, sizeof info->arch));
    uint64_t h = kp__rtc_hash(info->arch, entry, source);
    pthread_mutex_lock(&kp__rtc_mu);
    kp_status st = KP_OK;
    char *bin = NULL, path[4096];
    size_t bytes = 0;
    cudaLibrary_t lib = NULL;
    kp__rtc_entry *e = kp__rtc_find(h, info->arch, entry, source);
    if (e) {
        info->cached = 1;
        out->fn = (const void *)e->kernel;
        goto out;
    }
    if (kp__rtc_n == KP__RTC_MAX) {
        st = kp__error(KP_ERR_OUT_OF_MEMORY,
                       "the process holds %d kernels compiled at run time (the most it keeps)",
                       KP__RTC_MAX);
        goto out;
    }
    bool disk = kp__rtc_path(path, sizeof path, h, info->arch);
    if (disk && (bin = kp__rtc_disk_read(path, info->arch, entry, source, &bytes)))
        info->cached = 2;
    else
        KP_CHECK_GOTO(kp__rtc_nvrtc(info->arch, source, &bin, &bytes, &info->compile_ms), st, out);
    KP_CUDA_CHECK_GOTO(cudaLibraryLoadData(&lib, bin, NULL, NULL, 0, NULL, NULL, 0), st, out);
    e = &kp__rtc_cache[kp__rtc_n];
    memset(e, 0, sizeof *e);
    KP_CUDA_CHECK_GOTO(cudaLibraryGetKernel(&e->kernel, lib, entry), st, out);
    if (!(e->source = kp__malloc(strlen(source) + 1))) {
        st = kp__error(KP_ERR_OUT_OF_MEMORY, "kernel cache: no memory");
        goto out;
    }
    memcpy(e->source, source, strlen(source) + 1);
    e->hash = h;
    snprintf(e->arch, sizeof e->arch, "%s", info->arch);
    snprintf(e->entry, sizeof e->entry, "%s", entry);
    e->lib = lib;
    lib = NULL;
    kp__rtc_n++;
    out->fn = (const void *)e->kernel;
    if (disk && info->cached == 0) kp__rtc_disk_write(path, info->arch, entry, source, bin, bytes);
out:
    if (lib) KP_CUDA_IGNORE(cudaLibraryUnload(lib));
    pthread_mutex_unlock(&kp__rtc_mu);
    kp__free(bin);
    return st;
}
