/* programs.c: one cl_program per kernel family (kernels/<family>.cl), built on first use under a mutex.
 * Sources come from the table setup.py embeds, or from $TLGPU_KERNEL_DIR/<family>.cl when that is set.
 * Compiled binaries are cached on disk under sha256(source, options, platform/device/driver versions,
 * cache format, pointer width) in $TLGPU_CACHE_DIR (default $XDG_CACHE_HOME/tlgpu or ~/.cache/tlgpu;
 * an empty value disables the cache). An entry is a 56-byte header (magic, format, payload length, the
 * payload's sha256) and the driver's binary. It is written to a unique temporary file in the same
 * directory, fsync'd, then renamed over the entry, so readers (other processes too) never see half a
 * file and concurrent writers leave one complete entry. An entry whose header or checksum does not match
 * never reaches the driver; it, and one the driver refuses, is counted, rebuilt from source and rewritten.
 * A build failure returns the compiler's log inside the tl_err; nothing is printed. TLGPU_BUILD_OPTIONS is
 * appended to every family's options (tuning, e.g. -cl-nv-verbose; part of the cache key).
 * What is particular to a family (its source file, its -D options) or to a vendor (a rewrite of the built
 * binary) comes from the rules and the hook that the owning layers register (programs.h). */
#include "programs.h"
#include "settings.h"
#include "sha256.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FAMILIES 48
#define CACHE_FORMAT 2u                               /* 2: the payload's sha256 in the header */
#define HDR_LEN 56                                     /* magic 8, format u32, reserved u32, length u64, sha256 32 */
static const char MAGIC[8] = {'T', 'L', 'G', 'P', 'U', 'C', 'L', 'B'};

typedef struct { const char *family; cl_program prog; } built_program;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static built_program built[MAX_FAMILIES];
static int n_built;
static tl_program_stats stats;
static const tl_program_rule *rules[MAX_FAMILIES];    /* registered at import; read under `lock` */
static int n_rules;
static const tl_program_binary_hook *binary_hook;      /* set at import, before any build */

tl_status
tl_program_register(const tl_program_rule *rule, tl_err *err)
{
    int i;
    pthread_mutex_lock(&lock);
    for (i = 0; i < n_rules && strcmp(rules[i]->family, rule->family) != 0; i++) {}
    if (i < MAX_FAMILIES) rules[i] = rule;
    if (i == n_rules && i < MAX_FAMILIES) n_rules++;
    pthread_mutex_unlock(&lock);
    return i < MAX_FAMILIES ? TL_OK : tl_err_set(err, TL_E_INVALID, "tl_program_register", rule->family);
}

void
tl_program_set_binary_hook(const tl_program_binary_hook *hook)
{
    binary_hook = hook;
}

/* The family's rule, or NULL (built from kernels/<family>.cl with the common options). Caller holds `lock`. */
static const tl_program_rule *
find_rule(const char *family)
{
    for (int i = 0; i < n_rules; i++)
        if (strcmp(rules[i]->family, family) == 0) return rules[i];
    return NULL;
}

size_t
tl_round_up(size_t n, size_t m)
{
    return m == 0 ? n : (n + m - 1) / m * m;
}

static char *
read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (f == NULL) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
        else { buf[n] = '\0'; *len = (size_t)n; }
    }
    fclose(f);
    return buf;
}

/* A growing text: ok 0 once an allocation or a read failed. */
typedef struct {
    char *p;
    size_t n, cap;
    int ok;
} text_buf;

static void
buf_put(text_buf *b, const char *s, size_t n)
{
    if (!b->ok) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *q = realloc(b->p, cap);
        if (q == NULL) { b->ok = 0; return; }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

/* 1 and the quoted name when the line is `#include "name"` (spaces allowed around # and the name). */
static int
include_name(const char *s, size_t n, char *name, size_t cap)
{
    size_t i = 0, j;
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    if (i >= n || s[i++] != '#') return 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    if (n - i < 8 || strncmp(s + i, "include", 7) != 0) return 0;
    for (i += 7; i < n && (s[i] == ' ' || s[i] == '\t'); i++) {}
    if (i >= n || s[i++] != '"') return 0;
    for (j = i; j < n && s[j] != '"'; j++) {}
    if (j >= n || j - i >= cap || j == i) return 0;
    for (size_t k = j + 1; k < n; k++)
        if (s[k] != ' ' && s[k] != '\t' && s[k] != '\r') return 0;
    memcpy(name, s + i, j - i);
    name[j - i] = '\0';
    return 1;
}

/* dir/name with each `#include "x.h"` replaced by dir/x.h between #line markers, as setup.py embeds the sources:
 * a source read from TLGPU_KERNEL_DIR is then hashed with its headers (an edited header is a new cache key). */
static void
inline_file(const char *dir, const char *name, text_buf *b, int depth)
{
    char path[1024], inc[256], mark[400];
    size_t len, pos = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = depth < 16 ? read_file(path, &len) : NULL;
    if (text == NULL) { b->ok = 0; return; }
    for (int line = 1; pos < len && b->ok; line++) {
        size_t end = pos;
        while (end < len && text[end] != '\n') end++;
        if (include_name(text + pos, end - pos, inc, sizeof inc)) {
            buf_put(b, mark, (size_t)snprintf(mark, sizeof mark, "#line 1 \"%s\"\n", inc));
            inline_file(dir, inc, b, depth + 1);
            buf_put(b, mark, (size_t)snprintf(mark, sizeof mark, "\n#line %d \"%s\"\n", line + 1, name));
        } else {
            buf_put(b, text + pos, end - pos + (end < len));
        }
        pos = end + 1;
    }
    free(text);
}

/* The family's source text (malloc'd) and the directory for -I, or an error naming the family. */
static tl_status
family_source(const char *family, char **text, size_t *len, const char **incdir, tl_err *err)
{
    const char *dir = tl_setting_str(TL_SET_KERNEL_DIR);
    const tl_program_rule *rule = find_rule(family);
    *incdir = NULL;
    if (rule != NULL && rule->source != NULL) family = rule->source;   /* e.g. the GEMM tiers: one source */
    if (dir != NULL && *dir != '\0') {
        char path[1024];
        text_buf b = {NULL, 0, 0, 1};
        snprintf(path, sizeof path, "%s.cl", family);
        buf_put(&b, "#line 1 \"", 9);
        buf_put(&b, path, strlen(path));
        buf_put(&b, "\"\n", 2);
        inline_file(dir, path, &b, 0);
        if (!b.ok) {
            free(b.p);
            snprintf(path, sizeof path, "%s/%s.cl", dir, family);
            return tl_err_set(err, TL_E_INVALID, "tl_kernel_prepare", path);
        }
        *text = b.p;
        *len = b.n;
        *incdir = dir;
        return TL_OK;
    }
    for (const tl_kernel_src *s = tl_kernel_sources; s->name != NULL; s++) {
        if (strcmp(s->name, family) == 0) {
            if ((*text = malloc(s->len + 1)) == NULL) return tl_err_set(err, TL_E_NOMEM, "malloc", family);
            memcpy(*text, s->bytes, s->len + 1);
            *len = s->len;
            return TL_OK;
        }
    }
    return tl_err_set(err, TL_E_INVALID, "tl_kernel_prepare", family);
}

static void
family_options(const tl_runtime *rt, const char *family, const char *incdir, char *out, size_t cap)
{
    const char *extra = tl_setting_str(TL_SET_BUILD_OPTIONS);
    int k = snprintf(out, cap, "-cl-std=CL1.2 -DTL_MAX_WG=%zu", rt->info.max_wg);
    const tl_program_rule *rule = find_rule(family);
    if (rule != NULL && rule->options != NULL) {      /* the family's own options: part of the cache key */
        char own[512] = "";
        rule->options(rt, rule->arg, extra, own, sizeof own);
        k += snprintf(out + k, cap - (size_t)k, "%s", own);
    }
    if (tl_setting_flag(TL_SET_FAST_MATH))
        k += snprintf(out + k, cap - (size_t)k, " -cl-mad-enable -cl-fast-relaxed-math");
    if (extra != NULL && *extra != '\0') k += snprintf(out + k, cap - (size_t)k, " %s", extra);
    if (incdir != NULL) snprintf(out + k, cap - (size_t)k, " -I %s", incdir);
}

int
tl_program_cache_dir(char *out, size_t cap)
{
    const char *dir = tl_setting_str(TL_SET_CACHE_DIR), *xdg = tl_setting_str(TL_SET_XDG_CACHE_HOME);
    const char *home = tl_setting_str(TL_SET_HOME);
    out[0] = '\0';
    if (dir != NULL) {
        if (*dir == '\0') return 0;                       /* explicitly disabled */
        snprintf(out, cap, "%s", dir);
    } else if (xdg != NULL) {
        snprintf(out, cap, "%s/tlgpu", xdg);
    } else if (home != NULL) {
        snprintf(out, cap, "%s/.cache/tlgpu", home);
    } else {
        return 0;
    }
    return 1;
}

static void
cache_path(const tl_runtime *rt, const char *text, size_t len, const char *opts, char *out, size_t cap)
{
    char base[900], hex[65];
    tl_sha256 h;
    out[0] = '\0';
    if (!tl_program_cache_dir(base, sizeof base)) return;
    const char *parts[] = {opts, rt->info.platform, rt->info.platform_version, rt->info.name,
                           rt->info.version, rt->info.driver};
    unsigned fmt[2] = {CACHE_FORMAT, (unsigned)sizeof(void *)};
    tl_sha256_init(&h);
    tl_sha256_update(&h, text, len + 1);                  /* includes the NUL: a separator */
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) tl_sha256_update(&h, parts[i], strlen(parts[i]) + 1);
    tl_sha256_update(&h, fmt, sizeof fmt);
    tl_sha256_hex(&h, hex);
    snprintf(out, cap, "%s/%s.clbin", base, hex);
}

static void
mkdirs(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p == '/') { *p = '\0'; mkdir(tmp, 0755); *p = '/'; }
    }
}

static void
payload_digest(const unsigned char *bin, size_t n, unsigned char out[32])
{
    tl_sha256 h;
    tl_sha256_init(&h);
    tl_sha256_update(&h, bin, n);
    tl_sha256_final(&h, out);
}

static int
write_all(int fd, const void *data, size_t n)
{
    const unsigned char *p = data;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return 0;
        p += k;
        n -= (size_t)k;
    }
    return 1;
}

/* Makes the rename durable too; best effort (some file systems refuse fsync on a directory). */
static void
sync_parent(const char *path)
{
    char dir[1100];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL) return;
    *slash = '\0';
    int fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY);
    if (fd >= 0) { fsync(fd); close(fd); }
}

static void
cache_store(cl_program prog, const char *path)
{
    size_t n = 0;
    unsigned char *bin = NULL, hdr[HDR_LEN];
    char tmp[1100];
    int fd;
    if (path[0] == '\0' || clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL) != CL_SUCCESS ||
        n == 0 || (bin = malloc(n)) == NULL)
        goto done;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) != CL_SUCCESS) goto done;
    mkdirs(path);
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= sizeof tmp) goto done;
    if ((fd = mkstemp(tmp)) < 0) goto done;           /* unique even between threads of one process */
    uint32_t fmt[2] = {CACHE_FORMAT, 0};
    uint64_t len = n;
    memcpy(hdr, MAGIC, 8);
    memcpy(hdr + 8, fmt, 8);
    memcpy(hdr + 16, &len, 8);
    payload_digest(bin, n, hdr + 24);
    int ok = fchmod(fd, 0644) == 0 && write_all(fd, hdr, HDR_LEN) && write_all(fd, bin, n) && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0) {               /* atomic: the entry is whole, old or new */
        stats.cache_writes++;
        sync_parent(path);
    } else {
        unlink(tmp);
    }
done:
    free(bin);
}

/* Loads and builds a cached binary; NULL (and a counted reject) when the entry is absent or unusable. Only
 * a payload whose sha256 matches the header is handed to the driver. */
static cl_program
cache_load(const tl_runtime *rt, const char *path, const char *opts)
{
    size_t n = 0;
    char *data = path[0] ? read_file(path, &n) : NULL;
    cl_program prog = NULL;
    if (data == NULL) return NULL;
    uint64_t len = 0;
    uint32_t fmt[2] = {0, 0};
    unsigned char digest[32];
    if (n >= HDR_LEN) { memcpy(fmt, data + 8, 8); memcpy(&len, data + 16, 8); }
    if (n < HDR_LEN || memcmp(data, MAGIC, 8) != 0 || fmt[0] != CACHE_FORMAT || len != n - HDR_LEN || len == 0)
        goto reject;
    const unsigned char *bin = (const unsigned char *)data + HDR_LEN;
    size_t blen = (size_t)len;
    payload_digest(bin, blen, digest);
    if (memcmp(digest, data + 24, 32) != 0) goto reject;
    cl_int rc, bst;
    prog = clCreateProgramWithBinary(rt->ctx, 1, &rt->device, &blen, &bin, &bst, &rc);
    if (rc != CL_SUCCESS || bst != CL_SUCCESS) { prog = NULL; goto reject; }
    if (clBuildProgram(prog, 1, &rt->device, opts, NULL, NULL) != CL_SUCCESS) goto reject;
    stats.binary_loads++;
    free(data);
    return prog;
reject:
    if (prog != NULL) clReleaseProgram(prog);
    stats.cache_rejects++;
    free(data);
    return NULL;
}

static char *
build_log(cl_program prog, cl_device_id dev)
{
    size_t n = 0;
    char *log = NULL;
    if (clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) == CL_SUCCESS && n > 0 &&
        (log = malloc(n + 1)) != NULL) {
        if (clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log, NULL) != CL_SUCCESS) log[0] = '\0';
        log[n] = '\0';
    }
    return log != NULL ? log : strdup("<no log>");
}

/* The binary hook's rewrite (programs.h; the GEMM layer installs ptx_patch.c's): the rewritten binary is
 * built and replaces the program (and is what the cache keeps). Programs the hook leaves alone, and every
 * program where none applies, stay as they are. */
static tl_status
binary_rewrite(const tl_runtime *rt, const char *family, const char *opts, cl_program *prog, tl_err *err)
{
    size_t n = 0, m = 0;
    unsigned char *bin = NULL;
    char *text = NULL;
    const char *why = NULL;
    cl_int rc = CL_SUCCESS, bst = CL_SUCCESS;
    const tl_program_binary_hook *hook = binary_hook;
    if (hook == NULL || !hook->applies(rt)) return TL_OK;
    if (clGetProgramInfo(*prog, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL) != CL_SUCCESS || n == 0 ||
        (bin = malloc(n)) == NULL || clGetProgramInfo(*prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) != CL_SUCCESS) {
        free(bin);
        return tl_err_set(err, TL_E_INVALID, "clGetProgramInfo (the binary for the rewrite hook)", family);
    }
    int r = hook->rewrite((const char *)bin, n, &text, &m, &why);
    if (r == 0) { free(bin); return TL_OK; }
    const char *dump = tl_setting_str(TL_SET_PTX_DUMP);          /* a directory: the binary before and after */
    if (dump != NULL && *dump != '\0') {
        char f[1100];
        FILE *fp;
        snprintf(f, sizeof f, "%s/%s.%s", dump, family, hook->ext_in);
        if ((fp = fopen(f, "wb")) != NULL) { fwrite(bin, 1, n, fp); fclose(fp); }
        snprintf(f, sizeof f, "%s/%s.%s", dump, family, hook->ext_out);
        if (text != NULL && (fp = fopen(f, "wb")) != NULL) { fwrite(text, 1, m, fp); fclose(fp); }
    }
    free(bin);
    if (r < 0 || text == NULL) { free(text); return tl_err_set(err, TL_E_INVALID, hook->routine, why); }
    const unsigned char *src = (const unsigned char *)text;
    cl_program p2 = clCreateProgramWithBinary(rt->ctx, 1, &rt->device, &m, &src, &bst, &rc);
    if (rc == CL_SUCCESS && bst != CL_SUCCESS) rc = bst;
    if (rc == CL_SUCCESS && (rc = clBuildProgram(p2, 1, &rt->device, opts, NULL, NULL)) != CL_SUCCESS) {
        err->log = build_log(p2, rt->device);
        snprintf(err->options, sizeof err->options, "%s", opts);
    }
    free(text);
    if (rc != CL_SUCCESS) {
        if (p2 != NULL) clReleaseProgram(p2);
        return tl_err_set(err, rc, hook->build_routine, family);
    }
    clReleaseProgram(*prog);
    *prog = p2;
    return TL_OK;
}

/* Builds `text` (len bytes, consumed) with the family's options, through the disk cache; `label` names the
 * source in a build error. */
static tl_status
build_text(const tl_runtime *rt, const char *family, char *text, size_t len, const char *incdir, const char *label,
           cl_program *out, tl_err *err)
{
    char opts[1024], path[1100];
    cl_int rc;
    tl_status st;
    family_options(rt, family, incdir, opts, sizeof opts);
    cache_path(rt, text, len, opts, path, sizeof path);
    if ((*out = cache_load(rt, path, opts)) != NULL) { free(text); return TL_OK; }
    const char *src = text;
    cl_program prog = clCreateProgramWithSource(rt->ctx, 1, &src, &len, &rc);
    if (rc != CL_SUCCESS) { free(text); return tl_err_set(err, rc, "clCreateProgramWithSource", family); }
    stats.builds++;
    rc = clBuildProgram(prog, 1, &rt->device, opts, NULL, NULL);
    free(text);
    if (rc != CL_SUCCESS) {
        err->log = build_log(prog, rt->device);
        snprintf(err->options, sizeof err->options, "%s", opts);
        clReleaseProgram(prog);
        return tl_err_set(err, rc, "clBuildProgram", label);
    }
    if ((st = binary_rewrite(rt, family, opts, &prog, err)) != TL_OK) { clReleaseProgram(prog); return st; }
    cache_store(prog, path);
    *out = prog;
    return TL_OK;
}

static tl_status
build_family(const tl_runtime *rt, const char *family, cl_program *out, tl_err *err)
{
    char *text = NULL, file[160];
    const char *incdir;
    size_t len = 0;
    tl_status st = family_source(family, &text, &len, &incdir, err);
    if (st != TL_OK) return st;
    snprintf(file, sizeof file, "%s.cl", family);
    return build_text(rt, family, text, len, incdir, file, out, err);
}

/* The family's program, built if needed. Caller holds `lock`. */
static tl_status
get_program(const char *family, cl_program *out, tl_err *err)
{
    const tl_runtime *rt;
    tl_status st = tl_runtime_get(&rt, err);
    if (st != TL_OK) return st;
    for (int i = 0; i < n_built; i++)
        if (strcmp(built[i].family, family) == 0) { *out = built[i].prog; return TL_OK; }
    if (n_built == MAX_FAMILIES) return tl_err_set(err, TL_E_INVALID, "tl_kernel_prepare", "too many families");
    char *name = strdup(family);                          /* callers' strings need not outlive the call */
    if (name == NULL) return tl_err_set(err, TL_E_NOMEM, "strdup", family);
    if ((st = build_family(rt, family, out, err)) != TL_OK) { free(name); return st; }
    built[n_built].family = name;
    built[n_built++].prog = *out;
    return TL_OK;
}

tl_status
tl_program_create_kernel(const char *family, const char *name, cl_kernel *out, tl_err *err)
{
    cl_program prog;
    cl_int rc = CL_SUCCESS;
    pthread_mutex_lock(&lock);
    tl_status st = get_program(family, &prog, err);
    if (st == TL_OK) {
        *out = clCreateKernel(prog, name, &rc);
        if (rc != CL_SUCCESS) st = tl_err_set(err, rc, "clCreateKernel", name);
    }
    pthread_mutex_unlock(&lock);
    return st;
}

/* Generated programs (tlgpu.jit's fused kernels): a family's source followed by generated text, kept for the
 * process under (family, text). */
typedef struct { char *family, *text; cl_program prog; } generated_program;
static generated_program *generated;
static int n_generated, generated_room;

tl_status
tl_program_get_generated(const char *family, const char *text, const char *label, cl_program *out, tl_err *err)
{
    const tl_runtime *rt;
    char *base = NULL, *full = NULL, *fam = NULL, *copy = NULL;
    const char *incdir;
    size_t blen = 0, tlen = strlen(text);
    static const char line[] = "\n#line 1 \"generated\"\n";
    tl_status st = tl_runtime_get(&rt, err);
    if (st != TL_OK) return st;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_generated; i++)
        if (strcmp(generated[i].family, family) == 0 && strcmp(generated[i].text, text) == 0) {
            *out = generated[i].prog;
            pthread_mutex_unlock(&lock);
            return TL_OK;
        }
    if (n_generated == generated_room) {
        int room = generated_room ? 2 * generated_room : 16;
        generated_program *grown = realloc(generated, (size_t)room * sizeof *grown);
        if (grown == NULL) { st = tl_err_set(err, TL_E_NOMEM, "realloc", label); goto done; }
        generated = grown;
        generated_room = room;
    }
    if ((st = family_source(family, &base, &blen, &incdir, err)) != TL_OK) goto done;
    fam = strdup(family);
    copy = strdup(text);
    full = malloc(blen + sizeof line + tlen + 1);
    if (fam == NULL || copy == NULL || full == NULL) { free(full); st = tl_err_set(err, TL_E_NOMEM, "malloc", label); goto done; }
    memcpy(full, base, blen);
    memcpy(full + blen, line, sizeof line - 1);
    memcpy(full + blen + sizeof line - 1, text, tlen + 1);
    if ((st = build_text(rt, family, full, blen + sizeof line - 1 + tlen, incdir, label, out, err)) != TL_OK) goto done;
    generated[n_generated++] = (generated_program){fam, copy, *out};
    fam = copy = NULL;
done:
    pthread_mutex_unlock(&lock);
    free(base);
    free(fam);
    free(copy);
    return st;
}

tl_status
tl_kernel_prepare(tl_kernel *kh, tl_err *err)
{
    const tl_runtime *rt;
    cl_kernel k = NULL;
    size_t kmax = 0, mult = 1;
    if (__atomic_load_n(&kh->k, __ATOMIC_ACQUIRE) != NULL) return TL_OK;
    tl_status st = tl_program_create_kernel(kh->family, kh->name, &k, err);
    if (st != TL_OK || (st = tl_runtime_get(&rt, err)) != TL_OK) return st;
    clGetKernelWorkGroupInfo(k, rt->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL);
    clGetKernelWorkGroupInfo(k, rt->device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, sizeof mult, &mult, NULL);
    size_t wg = kmax < 256 ? kmax : 256;                  /* one fixed size: PoCL compiles one per size */
    if (mult > 0 && wg >= mult) wg -= wg % mult;
    pthread_mutex_lock(&lock);                           /* two threads may race to prepare one handle */
    if (kh->k == NULL) {
        kh->wg = wg > 0 ? wg : 1;
        __atomic_store_n(&kh->k, k, __ATOMIC_RELEASE);
        k = NULL;
    }
    pthread_mutex_unlock(&lock);
    if (k != NULL) clReleaseKernel(k);
    return TL_OK;
}

tl_status
tl_program_build_log(const char *family, char **log, tl_err *err)
{
    const tl_runtime *rt;
    cl_program prog;
    tl_status st = tl_runtime_get(&rt, err);
    if (st != TL_OK) return st;
    pthread_mutex_lock(&lock);
    if ((st = get_program(family, &prog, err)) == TL_OK) *log = build_log(prog, rt->device);
    pthread_mutex_unlock(&lock);
    return st;
}

void
tl_program_get_stats(tl_program_stats *out)
{
    pthread_mutex_lock(&lock);
    *out = stats;
    pthread_mutex_unlock(&lock);
}
