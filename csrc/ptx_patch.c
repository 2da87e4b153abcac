/* ptx_patch.c: see ptx_patch.h. The text is the driver's own PTX (CL_PROGRAM_BINARIES of an NVIDIA
 * build), so the rewrite is purely textual: ".target sm_90" followed by anything but an alphanumeric
 * (",", a space, an end of line) gets its "a", and each marker is cut out. */
#include "ptx_patch.h"
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

int
tl_ptx_marked(const char *ptx, size_t len)
{
    const size_t ml = strlen(TL_PTX_MARK);
    for (size_t i = 0; i + ml <= len; i++)
        if (ptx[i] == TL_PTX_MARK[0] && memcmp(ptx + i, TL_PTX_MARK, ml) == 0) return 1;
    return 0;
}

char *
tl_ptx_patch(const char *ptx, size_t len, size_t *out_len, const char **why)
{
    static const char target[] = ".target sm_90";
    const size_t tl = sizeof target - 1, ml = strlen(TL_PTX_MARK);
    const char *end = ptx + len, *t = NULL;
    for (const char *p = ptx; p + tl <= end && t == NULL; p++)
        if (memcmp(p, target, tl) == 0 && (p + tl == end || !isalnum((unsigned char)p[tl]))) t = p + tl;
    if (t == NULL) { *why = "no '.target sm_90' line (the device is not compute capability 9.0)"; return NULL; }
    char *out = malloc(len + 2), *o = out;
    if (out == NULL) { *why = "out of memory"; return NULL; }
    int marks = 0;
    for (const char *p = ptx; p < end;) {
        if (p == t) *o++ = 'a';
        if ((size_t)(end - p) >= ml && memcmp(p, TL_PTX_MARK, ml) == 0) {
            p += ml;
            marks++;
            continue;
        }
        *o++ = *p++;
    }
    if (t == end) *o++ = 'a';
    while (o > out && o[-1] == '\0') o--;                 /* the driver's binary may end in a NUL */
    *o = '\0';
    if (marks == 0) { free(out); *why = "no " TL_PTX_MARK "marker in the PTX"; return NULL; }
    *out_len = (size_t)(o - out);
    return out;
}
