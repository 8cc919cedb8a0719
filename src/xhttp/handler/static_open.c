/* static_open.c — a request's path to a file under the root: the name
 * (decoded, checked), the lookup that cannot leave the root, and the files
 * each worker keeps open for cache_ms so a busy file costs no open, fstat or
 * close per request. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "xhttp/core/tokens.h"
#include "xhttp/handler/static_headers.h"
#include "xhttp/handler/static_internal.h"

/* Workers whose loops get a cache; beyond them, files are opened per request. */
#define XSTATIC_MAX_CACHES 256

/* One worker's: the files it keeps open, and the compressed bodies. */
struct xStaticCache {
    _Atomic(xEventLoop *) loop; /* the worker that claimed it; NULL: free */
    xStaticFile **buckets;      /* a power of two of them; touched by that worker only;
                                   NULL: files are opened per request */
    size_t mask, count;
    size_t kept_bytes;        /* of the files its entries hold in memory */
    uint64_t next_sweep;      /* when entries past their time are closed, even unasked */
    xStaticCodedCache *coded; /* made on first use */
};

/* O_NONBLOCK: opening a FIFO someone left under root must not wait for a
 * writer (it is refused as not a regular file right after). */
#define OPEN_FLAGS (O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)

int xHttpStaticName(const xHttpStatic *files, xStr raw, char *name, size_t *len, bool *directory_named) {
    if (raw.len > PATH_MAX || xHttpPercentDecode(raw, name, PATH_MAX, XHTTP_DECODE_REFUSE_NUL, len) != XOK ||
        !xHttpStaticPathIsSafe((xStr){name, *len}))
        return 404;
    *directory_named = *len == 0 || name[*len - 1] == '/';
    if (*directory_named) {
        if (!files->index) return 403; /* a directory, but no listing */
        size_t n = strlen(files->index);
        memcpy(name + *len, files->index, n);
        *len += n;
    }
    name[*len] = '\0';
    return 0;
}

/* openat2 may be missing (before Linux 5.6) or refused by a seccomp filter
 * (older container runtimes answer ENOSYS or EPERM): then lookups walk the
 * name a component at a time and follow no symbolic link (open_walking). */
static bool has_openat2(int root_fd) {
    struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_BENEATH};
    int fd = (int)syscall(SYS_openat2, root_fd, ".", &how, sizeof how);
    if (fd < 0) return false;
    close(fd);
    return true;
}

xErrno xHttpStaticOpenRoot(xHttpStatic *files, const char *root) {
    files->root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (files->root_fd < 0) return XERR_SYS;
    files->beneath = has_openat2(files->root_fd);
    return XOK;
}

/* Without openat2: one component at a time, none of them a symbolic link
 * (O_NOFOLLOW), so no link can lead out; links inside root are refused too. */
static int open_walking(int root_fd, char *name) {
    int dir = root_fd;
    char *p = name;
    for (;;) {
        char *slash = strchr(p, '/');
        if (slash) *slash = '\0';
        int fd =
            openat(dir, p, slash ? O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC : OPEN_FLAGS | O_NOFOLLOW);
        int saved = errno;
        if (dir != root_fd) close(dir);
        if (slash) *slash = '/';
        errno = saved;
        if (fd < 0 || !slash) return fd;
        dir = fd;
        p = slash + 1;
    }
}

static int open_beneath(const xHttpStatic *files, char *name) {
    if (!files->beneath) return open_walking(files->root_fd, name);
    struct open_how how = {.flags = OPEN_FLAGS, .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    return (int)syscall(SYS_openat2, files->root_fd, name, &how, sizeof how);
}

static char *put_hex(char *p, uint64_t v) {
    char tmp[16];
    int n = 0;
    do tmp[n++] = "0123456789abcdef"[v & 15];
    while ((v >>= 4) != 0);
    while (n) *p++ = tmp[--n];
    return p;
}

static const char *media_type(const xHttpStatic *files, xStr name) {
    xStr ext = xHttpStaticExtension(name);
    for (size_t i = 0; i < files->num_types; i++)
        if (xHttpNameEquals(ext, files->types[i].extension)) return files->types[i].type;
    return xHttpStaticMediaType(ext);
}

static char *put_line(char *p, const char *name, const char *value) {
    size_t n = strlen(name), v = strlen(value);
    memcpy(p, name, n);
    memcpy(p + n, ": ", 2);
    memcpy(p + n + 2, value, v);
    memcpy(p + n + 2 + v, "\r\n", 2);
    return p + n + v + 4;
}

/* The header lines of every answer from f, made once per opening rather than
 * per response; a twin's type is its file's. Their values were checked when
 * files was made, so they go in as they are. False when out of memory. */
static bool make_head(const xHttpStatic *files, xStaticFile *f) {
    const char *type = media_type(files, (xStr){f->name, f->name_len - (f->coding ? 3 : 0)});
    size_t cap = 128 + strlen(f->etag) + XHTTP_DATE_LEN + strlen(type) +
                 (files->cache_control ? strlen(files->cache_control) + 20 : 0);
    char *p = f->head = malloc(cap);
    if (!p) return false;
    p = put_line(p, "ETag", f->etag);
    p = put_line(p, "Last-Modified", f->last_modified);
    if (files->precompressed) p = put_line(p, "Vary", "Accept-Encoding");
    if (files->cache_control) p = put_line(p, "Cache-Control", files->cache_control);
    f->validators_len = (size_t)(p - f->head);
    p = put_line(p, "Content-Type", type);
    f->type = type;
    f->type_end = (size_t)(p - f->head);
    if (f->coding) p = put_line(p, "Content-Encoding", f->coding);
    p = put_line(p, "Accept-Ranges", "bytes");
    f->head_len = (size_t)(p - f->head);
    return true;
}

/* The validators, formatted once per opening rather than per response. */
static void format_validators(xStaticFile *f) {
    char *p = f->etag;
    *p++ = '"';
    p = put_hex(p, (uint64_t)f->st.st_size);
    *p++ = '-';
    p = put_hex(p, (uint64_t)f->st.st_mtim.tv_sec);
    *p++ = '.';
    p = put_hex(p, (uint64_t)f->st.st_mtim.tv_nsec);
    if (f->coding) {
        *p++ = '-';
        size_t n = strlen(f->coding);
        memcpy(p, f->coding, n);
        p += n;
    }
    *p++ = '"';
    *p = '\0';
    xHttpFormatDate(f->last_modified, f->st.st_mtim.tv_sec);
}

/* Why a name could not be served: 404 when there is nothing (or nothing
 * under root) by that name, 403 when there is but it may not be read. */
static int refusal(int open_errno) { return open_errno == EACCES || open_errno == EPERM ? 403 : 404; }

xStaticFile *xHttpStaticOpen(const xHttpStatic *files, const char *name, size_t len, bool directory_named,
                             const char *coding) {
    xStaticFile *f = malloc(sizeof *f + len + 1);
    if (!f) return NULL;
    memcpy(f->name, name, len);
    f->name[len] = '\0';
    f->name_len = len;
    f->directory_named = directory_named;
    f->coding = coding;
    f->refs = 1;
    f->next = NULL;
    f->head = NULL;
    f->content = NULL;
    f->codings_of = NULL;
    f->codings = 0;
    f->fd = open_beneath(files, f->name);
    if (f->fd < 0) {
        f->status = refusal(errno);
        return f;
    }
    if (fstat(f->fd, &f->st) == 0 && S_ISREG(f->st.st_mode)) {
        f->status = 0;
        format_validators(f);
        if (make_head(files, f)) return f;
        xHttpStaticPut(f);
        return NULL;
    }
    f->status = S_ISDIR(f->st.st_mode) && !directory_named && files->index ? 301 : 403;
    close(f->fd);
    f->fd = -1;
    return f;
}

void xHttpStaticPut(void *file) {
    xStaticFile *f = file;
    if (--f->refs) return;
    if (f->fd >= 0) close(f->fd);
    free(f->head);
    free(f->content);
    free(f);
}

/* Whether workers keep the files they open. */
static bool keeps_files(const xHttpStatic *files) { return files->cache_ms && files->cache_entries; }

xErrno xHttpStaticCachesInit(xHttpStatic *files) {
    if (!keeps_files(files) && !(files->compress_on_the_fly && files->compress_bytes_max)) return XOK;
    files->caches = calloc(XSTATIC_MAX_CACHES, sizeof *files->caches);
    return files->caches ? XOK : XERR_NOMEM;
}

void xHttpStaticCachesFree(xHttpStatic *files) {
    if (!files->caches) return;
    for (size_t i = 0; i < XSTATIC_MAX_CACHES; i++) {
        xStaticCache *c = &files->caches[i];
        for (size_t b = 0; c->buckets && b <= c->mask; b++) {
            while (c->buckets[b]) {
                xStaticFile *f = c->buckets[b];
                c->buckets[b] = f->next;
                xHttpStaticPut(f);
            }
        }
        free(c->buckets);
        xStaticCodedCacheDestroy(c->coded);
    }
    free(files->caches);
    files->caches = NULL;
}

/* loop's cache: the slot it claimed, or the first free one, claimed now. A
 * slot is only ever claimed, never given back, so a worker finds its own
 * without a lock. NULL when files keeps nothing or all are taken. */
static xStaticCache *cache_of(const xHttpStatic *files, xEventLoop *loop) {
    if (!files->caches) return NULL;
    for (size_t i = 0; i < XSTATIC_MAX_CACHES; i++) {
        xStaticCache *c = &files->caches[i];
        xEventLoop *owner = atomic_load_explicit(&c->loop, memory_order_acquire);
        if (!owner && atomic_compare_exchange_strong(&c->loop, &owner, loop)) {
            size_t n = 16;
            while (n < files->cache_entries) n *= 2;
            c->buckets = keeps_files(files) ? calloc(n, sizeof *c->buckets) : NULL;
            c->mask = n - 1;
            owner = loop;
        }
        if (owner == loop) return c;
    }
    return NULL;
}

xStaticCodedCache *xHttpStaticCodedCacheOf(const xHttpStatic *files, xEventLoop *loop) {
    if (!files->compress_bytes_max) return NULL;
    xStaticCache *c = cache_of(files, loop);
    if (c && !c->coded) c->coded = xStaticCodedCacheCreate(files->compress_bytes_max);
    return c ? c->coded : NULL;
}

static uint32_t key_hash(const char *name, size_t len, bool directory_named, const char *coding) {
    uint32_t h = 2166136261u ^ (uint32_t)directory_named ^ (uint32_t)(uintptr_t)coding;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)name[i]) * 16777619u;
    return h;
}

/* Takes f out of c's accounts; the caller unlinks it and drops c's reference. */
static void uncount(xStaticCache *c, const xStaticFile *f) {
    c->count--;
    if (f->content) c->kept_bytes -= (size_t)f->st.st_size;
}

bool xHttpStaticReadWhole(const xStaticFile *f, char *to) {
    size_t size = (size_t)f->st.st_size, got = 0;
    while (got < size) {
        ssize_t n = pread(f->fd, to + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        got += (size_t)n;
    }
    return true;
}

/* Reads a small file's bytes into memory, while c's budget allows: served
 * from there, a response costs no read(2). A file that is not st_size long
 * when read (being rewritten) is left to be read per response. */
static void keep_content(const xHttpStatic *files, xStaticCache *c, xStaticFile *f) {
    size_t size = (size_t)f->st.st_size;
    if (f->status != 0 || size == 0 || size > files->keep_file_max ||
        size > files->keep_bytes_max - c->kept_bytes)
        return;
    char *content = malloc(size);
    if (!content || !xHttpStaticReadWhole(f, content)) {
        free(content);
        return;
    }
    f->content = content;
    c->kept_bytes += size;
}

/* Drops every entry past its time: to make room, and once per cache_ms so
 * a file deleted or replaced on disk is not held open long after. */
static void sweep(xStaticCache *c, uint64_t now) {
    for (size_t b = 0; b <= c->mask; b++) {
        xStaticFile **link = &c->buckets[b];
        while (*link) {
            xStaticFile *f = *link;
            if (now < f->expires_ms) {
                link = &f->next;
                continue;
            }
            *link = f->next;
            uncount(c, f);
            xHttpStaticPut(f);
        }
    }
}

xStaticFile *xHttpStaticGet(const xHttpStatic *files, xEventLoop *loop, const char *name, size_t len,
                            bool directory_named, const char *coding) {
    xStaticCache *c = cache_of(files, loop);
    if (!c || !c->buckets) return xHttpStaticOpen(files, name, len, directory_named, coding);
    uint64_t now = xEventLoopNowMs(loop);
    if (now >= c->next_sweep) {
        sweep(c, now);
        c->next_sweep = now + files->cache_ms;
    }
    uint32_t h = key_hash(name, len, directory_named, coding);
    for (xStaticFile **link = &c->buckets[h & c->mask]; *link; link = &(*link)->next) {
        xStaticFile *f = *link;
        if (f->hash != h || f->name_len != len || f->directory_named != directory_named ||
            f->coding != coding || memcmp(f->name, name, len) != 0)
            continue;
        if (now < f->expires_ms) {
            f->refs++;
            return f;
        }
        *link = f->next; /* past its time: opened again below */
        uncount(c, f);
        xHttpStaticPut(f);
        break;
    }
    xStaticFile *f = xHttpStaticOpen(files, name, len, directory_named, coding);
    if (!f) return NULL;
    if (c->count >= files->cache_entries) sweep(c, now);
    if (c->count < files->cache_entries) {
        f->hash = h;
        f->expires_ms = now + files->cache_ms;
        f->next = c->buckets[h & c->mask];
        c->buckets[h & c->mask] = f;
        c->count++;
        f->refs++; /* the cache's */
        keep_content(files, c, f);
    }
    return f;
}
