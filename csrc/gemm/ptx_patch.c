/* ptx_patch.c: see ptx_patch.h. The text is the driver's own PTX (CL_PROGRAM_BINARIES of an NVIDIA
 * build), so the rewrite is purely textual: ".target sm_90" followed by anything but an alphanumeric
 * (",", a space, an end of line) gets its "a", and each marker is cut out. The rest of a TL_PTX_ENTRY
 * marker's line is a directive of the kernel whose body holds it (".reqnctapercluster 2, 1, 1"): it moves
 * to just before that body's opening "{", where PTX wants performance directives. */
#include "ptx_patch.h"
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

int
tl_ptx_marked(const char *ptx, size_t len)
{
    const size_t ml = strlen(TL_PTX_MARK), el = strlen(TL_PTX_ENTRY);
    for (size_t i = 0; i + ml <= len; i++)
        if (ptx[i] == TL_PTX_MARK[0] && (memcmp(ptx + i, TL_PTX_MARK, ml) == 0 ||
                                         (i + el <= len && memcmp(ptx + i, TL_PTX_ENTRY, el) == 0)))
            return 1;
    return 0;
}

/* 1 when p starts a line whose first non-blank character is c. */
static int
line_starts(const char *p, const char *start, const char *end, char c)
{
    if (p > start && p[-1] != '\n') return 0;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p < end && *p == c;
}

/* Copies to o the directives (TL_PTX_ENTRY markers' lines) of the body from p to the next .entry. */
static char *
hoist(char *o, const char *p, const char *end)
{
    const size_t ml = strlen(TL_PTX_ENTRY);
    for (; p + ml < end && memcmp(p, ".entry", 6) != 0; p++) {
        if (memcmp(p, TL_PTX_ENTRY, ml) != 0) continue;
        for (p += ml; p < end && *p != '\n'; p++) *o++ = *p;
        *o++ = '\n';
    }
    return o;
}

char *
tl_ptx_patch(const char *ptx, size_t len, size_t *out_len, const char **why)
{
    static const char target[] = ".target sm_90";
    const size_t tl = sizeof target - 1, ml = strlen(TL_PTX_MARK), el = strlen(TL_PTX_ENTRY);
    const char *end = ptx + len, *t = NULL;
    for (const char *p = ptx; p + tl <= end && t == NULL; p++)
        if (memcmp(p, target, tl) == 0 && (p + tl == end || !isalnum((unsigned char)p[tl]))) t = p + tl;
    if (t == NULL) { *why = "no '.target sm_90' line (the device is not compute capability 9.0)"; return NULL; }
    char *out = malloc(2 * len + 2), *o = out;           /* hoisted directives appear twice at most */
    if (out == NULL) { *why = "out of memory"; return NULL; }
    int marks = 0, header = 0;                            /* header: between ".entry" and its body */
    for (const char *p = ptx; p < end;) {
        if (p == t) *o++ = 'a';
        if (header && line_starts(p, ptx, end, '{')) {
            o = hoist(o, p, end);
            header = 0;
        }
        if ((size_t)(end - p) >= ml && memcmp(p, TL_PTX_MARK, ml) == 0) {
            p += ml;
            marks++;
            continue;
        }
        if ((size_t)(end - p) >= el && memcmp(p, TL_PTX_ENTRY, el) == 0) {   /* a directive, hoisted already */
            marks++;
            while (p < end && *p != '\n') p++;
            continue;
        }
        if ((size_t)(end - p) >= 6 && memcmp(p, ".entry", 6) == 0) header = 1;
        *o++ = *p++;
    }
    if (t == end) *o++ = 'a';
    while (o > out && o[-1] == '\0') o--;                 /* the driver's binary may end in a NUL */
    *o = '\0';
    if (marks == 0) { free(out); *why = "no " TL_PTX_MARK "marker in the PTX"; return NULL; }
    *out_len = (size_t)(o - out);
    return out;
}

static int
ptx_applies(const tl_runtime *rt)
{
    return strstr(rt->info.platform, "NVIDIA") != NULL;
}

static int
ptx_rewrite(const char *bin, size_t len, char **out, size_t *out_len, const char **why)
{
    if (!tl_ptx_marked(bin, len)) return 0;
    *out = tl_ptx_patch(bin, len, out_len, why);
    return *out != NULL ? 1 : -1;
}

const tl_program_binary_hook tl_ptx_binary_hook = {ptx_applies, ptx_rewrite, "ptx", "sm90a.ptx", "ptx patch",
                                                   "clBuildProgram (patched PTX)"};
