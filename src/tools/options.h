/* Option parsing helpers for the kpipe commands. */
#ifndef KPIPE_TOOL_OPTIONS_H
#define KPIPE_TOOL_OPTIONS_H

#include <stdio.h>

#include "kpipe/kpipe.h"

/* 1: argv[*i] is option `name` and *value its value (*i advanced past it);
 * 0: another argument; -1: the value is missing (message printed). */
int kpt_opt_value(int argc, char **argv, int *i, const char *name, const char **value);
/* Parses a whole number in [min, max]; prints a message naming `opt` if not. */
bool kpt_parse_count(const char *opt, const char *text, long min, long max, long *out);
/* "graph" / "stream"; prints a message if neither. */
bool kpt_parse_mode(const char *text, int *mode);
/* The first registered backend with a device that is not the host's ("cuda"
 * on a GPU machine), else "cpu". */
const char *kpt_default_device(void);

#endif
