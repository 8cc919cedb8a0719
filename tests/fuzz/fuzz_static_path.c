/* fuzz_static_path.c — the static file handler's path resolution
 * (xHttpStaticName and xHttpStaticOpen) on arbitrary request paths, against a real directory.
 *
 * Made once in a temporary directory: top/secret.txt, and top/root/ (the
 * served root) with files, a subdirectory with an index, and symbolic links
 * that stay inside (to a file, to a directory) and that lead out (relative,
 * absolute, to "..", through a subdirectory). The input, in its own heap
 * block, is the path as a request has it (not yet percent-decoded); it is
 * resolved twice, by openat2 (RESOLVE_BENEATH) and by the component walk the
 * handler falls back to without it. Checked after every input:
 *   - each answer is 0 (a file opened), 301, 403 or 404, and only 0 has a
 *     descriptor;
 *   - a file opened is one of the regular files under root (by device and
 *     inode), never the secret outside it;
 *   - the walk, which follows no link at all, opens nothing that openat2
 *     does not open too, and then the same file. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_check.h"
#include "xhttp/handler/static_internal.h"

#define MAX_INSIDE 8

static char top[64];
static struct stat inside[MAX_INSIDE];
static size_t num_inside;
static struct stat secret;
static xHttpStatic *beneath, *walking;

static void put_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    FUZZ_ASSERT(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

static void put_link(const char *target, const char *path) {
    FUZZ_ASSERT(symlink(target, path) == 0, "cannot link %s", path);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static void remove_tree(void) {
    nftw(top, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    xHttpStaticDestroy(beneath);
    xHttpStaticDestroy(walking);
}

static void set_up(void) {
    snprintf(top, sizeof top, "/tmp/xk-fuzz-static-XXXXXX");
    FUZZ_ASSERT(mkdtemp(top) != NULL, "mkdtemp");
    char path[256], root[128];
    snprintf(root, sizeof root, "%s/root", top);
    FUZZ_ASSERT(mkdir(root, 0755) == 0, "mkdir root");
    snprintf(path, sizeof path, "%s/sub", root);
    FUZZ_ASSERT(mkdir(path, 0755) == 0, "mkdir sub");
    const char *files[] = {"index.html", "a.txt", "sub/index.html", "sub/b.txt", "sub/b.txt.gz"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", root, files[i]);
        put_file(path, files[i]);
        FUZZ_ASSERT(stat(path, &inside[num_inside++]) == 0, "stat %s", path);
    }
    snprintf(path, sizeof path, "%s/secret.txt", top);
    put_file(path, "secret\n");
    FUZZ_ASSERT(stat(path, &secret) == 0, "stat secret");
    char link[256];
    const char *links[][2] = {{"a.txt", "link-in"}, {"sub", "dir-link"},  {"../secret.txt", "link-out"},
                              {"..", "up"},         {"../..", "sub/up2"}, {"../../secret.txt", "sub/out"}};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        snprintf(link, sizeof link, "%s/%s", root, links[i][1]);
        put_link(links[i][0], link);
    }
    snprintf(link, sizeof link, "%s/link-abs", root);
    put_link(path, link);

    xHttpStaticConf conf;
    xHttpStaticConfInit(&conf);
    conf.root = root;
    FUZZ_ASSERT(xHttpStaticCreate(&conf, &beneath) == XOK && xHttpStaticCreate(&conf, &walking) == XOK,
                "create");
    walking->beneath = false;
    atexit(remove_tree);
}

static bool is_inside(const struct stat *st) {
    for (size_t i = 0; i < num_inside; i++)
        if (st->st_dev == inside[i].st_dev && st->st_ino == inside[i].st_ino) return true;
    return false;
}

/* Resolves raw as the handler does, without the cache: the name, then the
 * file. Returns the file (NULL: the name was refused, *status says why). */
static xStaticFile *resolve(const xHttpStatic *files, xStr raw, int *status) {
    static char name[XSTATIC_NAME_ROOM];
    size_t len;
    bool directory_named;
    *status = xHttpStaticName(files, raw, name, &len, &directory_named);
    FUZZ_ASSERT(*status == 0 || *status == 403 || *status == 404, "name status %d", *status);
    if (*status) return NULL;
    FUZZ_ASSERT(len < XSTATIC_NAME_ROOM && strlen(name) == len, "name of %zu bytes", len);
    xStaticFile *f = xHttpStaticOpen(files, name, len, directory_named, NULL);
    FUZZ_ASSERT(f != NULL, "out of memory");
    *status = f->status;
    return f;
}

static void check(const xStaticFile *f, int status, const char *how, xStr raw) {
    FUZZ_ASSERT(status == 0 || status == 301 || status == 403 || status == 404, "%s: status %d", how, status);
    if (!f) return;
    FUZZ_ASSERT((status == 0) == (f->fd >= 0), "%s: status %d with fd %d", how, status, f->fd);
    if (status) return;
    struct stat st;
    FUZZ_ASSERT(fstat(f->fd, &st) == 0, "fstat");
    FUZZ_ASSERT(!(st.st_dev == secret.st_dev && st.st_ino == secret.st_ino), "%s: \"%.*s\" opened the secret",
                how, (int)raw.len, raw.data);
    FUZZ_ASSERT(is_inside(&st), "%s: \"%.*s\" opened a file not under root", how, (int)raw.len, raw.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!beneath) set_up();
    char *copy = malloc(size ? size : 1);
    FUZZ_ASSERT(copy != NULL, "out of memory");
    memcpy(copy, data, size);
    xStr raw = {copy, size};
    int a_status, b_status;
    xStaticFile *a = resolve(beneath, raw, &a_status);
    xStaticFile *b = resolve(walking, raw, &b_status);
    check(a, a_status, "openat2", raw);
    check(b, b_status, "walk", raw);
    if (b_status == 0) {
        FUZZ_ASSERT(a_status == 0 && a->st.st_ino == b->st.st_ino,
                    "the walk opened \"%.*s\", openat2 did not", (int)size, copy);
    }
    if (a) xHttpStaticPut(a);
    if (b) xHttpStaticPut(b);
    free(copy);
    return 0;
}
