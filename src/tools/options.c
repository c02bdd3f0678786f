/* Option parsing shared by the commands: "--name value" or "--name=value". */
#include <stdlib.h>
#include <string.h>

#include "options.h"

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
    if (strcmp(text, "graph") == 0) *mode = KP_EXEC_GRAPH;
    else if (strcmp(text, "stream") == 0) *mode = KP_EXEC_STREAM;
    else {
        fprintf(stderr, "--mode: \"%s\" is not graph or stream\n", text);
        return false;
    }
    return true;
}

const char *kpt_default_device(void) { return kp_cuda_device_count(NULL, 0) > 0 ? "cuda" : "cpu"; }
