/* Shared by the commands: error reporting, and option parsing ("--name value"
 * or "--name=value"). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "tool-impl.h"

bool kpt_is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }

static char kpt_detail[1024];

kp_status kpt_error(kp_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kpt_detail, sizeof kpt_detail, fmt, ap);
    va_end(ap);
    return st;
}

kp_status kpt_keep_error(kp_status st) {
    if (st != KP_OK && !kpt_detail[0])
        snprintf(kpt_detail, sizeof kpt_detail, "%s", kp_last_error());
    return st;
}

int kpt_fail(const char *cmd, kp_status st) {
    const char *detail = kpt_detail[0] ? kpt_detail : kp_last_error();
    fprintf(stderr, "kpipe %s: %s%s%s\n", cmd, kp_status_str(st), *detail ? ": " : "", detail);
    kpt_detail[0] = '\0';
    return 1;
}

int kpt_opt_value(int argc, char **argv, int *i, const char *name, const char **value) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "option %s needs a value\n", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

bool kpt_parse_count(const char *opt, const char *text, long min, long max, long *out) {
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "%s: \"%s\" is not a whole number from %ld to %ld\n", opt, text, min, max);
        return false;
    }
    *out = v;
    return true;
}

bool kpt_parse_mode(const char *text, int *mode) {
    if (strcmp(text, "graph") == 0)
        *mode = KP_EXEC_GRAPH;
    else if (strcmp(text, "stream") == 0)
        *mode = KP_EXEC_STREAM;
    else {
        fprintf(stderr, "--mode: \"%s\" is not graph or stream\n", text);
        return false;
    }
    return true;
}

/* The first registered backend that runs device kernels and has a device;
 * the host otherwise. */
const char *kpt_default_device(void) {
    const char *name;
    for (size_t i = 0; (name = kp_backend_name(i)) != NULL; i++)
        if (strcmp(kp_backend_find(name)->kernel_form, "host") != 0 &&
            kp_device_count(name, NULL, 0) > 0)
            return name;
    return "cpu";
}
