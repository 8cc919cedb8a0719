/* replay_main.c — runs a fuzz harness once on every file of the corpus
 * directories (or single files) named on the command line: how `make test`
 * replays the checked-in corpora without clang or libFuzzer. A broken
 * invariant aborts, which fails the test; so does finding no input at all. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_check.h"

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *bigger = realloc(buf, cap *= 2);
            if (!bigger) free(buf);
            buf = bigger;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading %s\n", path);
        return -1;
    }
    /* An exact-sized copy, as libFuzzer gives, so an over-read is caught. */
    uint8_t *input = malloc(len ? len : 1);
    if (!input) {
        free(buf);
        return -1;
    }
    memcpy(input, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(input, len);
    free(input);
    return 1;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file in dir, in name order; subfolders are not
 * entered (name them separately). Returns the number replayed, -1 on error. */
static int replay_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot open %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            char **bigger = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *names);
            if (!bigger) break;
            names = bigger;
        }
        size_t plen = strlen(dir) + strlen(e->d_name) + 2;
        if ((names[n] = malloc(plen)) == NULL) break;
        snprintf(names[n++], plen, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, compare_names);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (count >= 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            count = replay_file(names[i]) < 0 ? -1 : count + 1;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    int total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        int n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]);
        if (n < 0) return 1;
        printf("%s: %d inputs replayed\n", argv[i], n);
        total += n;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no inputs found\n");
        return 1;
    }
    return 0;
}
