/* test_static_coded.c — the per-worker cache of static files' compressed
 * bodies (xhttp/handler/static_coded.h): found by the file's identity and
 * coding, never above its bound in bytes, the least recently used dropped
 * first, another version of a file dropped when asked for, and a body still
 * being sent alive after the cache let go of it. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "xhttp/handler/static_coded.h"

#define GZIP 1u
#define BROTLI 2u

static xStaticCodedKey key(uint64_t inode, int64_t mtime_nsec, unsigned coding) {
    return (xStaticCodedKey){.device = 7,
                             .inode = inode,
                             .size = 4096,
                             .mtime_sec = 1700000000,
                             .mtime_nsec = mtime_nsec,
                             .coding = coding};
}

/* len bytes of fill, of malloc's, as the filter hands them over. */
static void *body(size_t len, char fill) {
    char *p = malloc(len);
    memset(p, fill, len);
    return p;
}

/* Keeps a body for k and drops the caller's reference at once. */
static void keep(xStaticCodedCache *c, uint64_t inode, size_t len) {
    xStaticCodedKey k = key(inode, 0, GZIP);
    xStaticCodedPut(xStaticCodedKeep(c, &k, body(len, (char)inode), len));
}

static bool has(xStaticCodedCache *c, uint64_t inode) {
    xStaticCodedKey k = key(inode, 0, GZIP);
    xStaticCoded *e = xStaticCodedFind(c, &k);
    if (e) xStaticCodedPut(e);
    return e != NULL;
}

static void test_a_kept_body_is_found_by_its_file_and_coding(void) {
    xStaticCodedCache *c = xStaticCodedCacheCreate(1 << 20);
    xStaticCodedKey gz = key(1, 5, GZIP), br = key(1, 5, BROTLI), other = key(2, 5, GZIP);
    CHECK(xStaticCodedFind(c, &gz) == NULL);
    xStaticCoded *e = xStaticCodedKeep(c, &gz, body(100, 'g'), 100);
    CHECK(e && e->len == 100 && ((char *)e->bytes)[99] == 'g');
    xStaticCodedPut(e);
    xStaticCodedPut(xStaticCodedKeep(c, &br, body(80, 'b'), 80));
    xStaticCoded *found = xStaticCodedFind(c, &gz);
    CHECK(found == e && found->len == 100);
    xStaticCodedPut(found);
    found = xStaticCodedFind(c, &br);
    CHECK(found && found->len == 80 && ((char *)found->bytes)[0] == 'b');
    xStaticCodedPut(found);
    CHECK(xStaticCodedFind(c, &other) == NULL);
    CHECK_EQ_INT(xStaticCodedCacheCount(c), 2);
    xStaticCodedCacheDestroy(c);
}

static void test_the_key_is_the_file_s_identity(void) {
    struct stat st = {0};
    st.st_dev = 3;
    st.st_ino = 44;
    st.st_size = 5000;
    st.st_mtim.tv_sec = 1700000000;
    st.st_mtim.tv_nsec = 123456789;
    xStaticCodedKey k = xStaticCodedKeyOf(&st, BROTLI);
    CHECK(k.device == 3 && k.inode == 44 && k.size == 5000 && k.mtime_sec == 1700000000 &&
          k.mtime_nsec == 123456789 && k.coding == BROTLI);
}

static void test_the_bound_holds_however_many_files_come(void) {
    size_t each = sizeof(xStaticCoded) + 1000, bound = 10 * each;
    xStaticCodedCache *c = xStaticCodedCacheCreate(bound);
    for (uint64_t inode = 1; inode <= 500; inode++) {
        keep(c, inode, 1000);
        CHECK_MSG(xStaticCodedCacheBytes(c) <= bound, "%zu bytes kept after %llu files",
                  xStaticCodedCacheBytes(c), (unsigned long long)inode);
    }
    CHECK_EQ_INT(xStaticCodedCacheCount(c), 10);
    CHECK_EQ_INT(xStaticCodedCacheBytes(c), bound);
    for (uint64_t inode = 491; inode <= 500; inode++)
        CHECK_MSG(has(c, inode), "file %llu", (unsigned long long)inode);
    CHECK(!has(c, 490));
    CHECK(!has(c, 1));
    /* Bodies of every size, and some that saves nothing (no bytes). */
    for (uint64_t inode = 1000; inode < 1400; inode++) {
        xStaticCodedKey k = key(inode, 0, GZIP);
        size_t len = (size_t)(inode * 37 % 3000);
        xStaticCodedPut(xStaticCodedKeep(c, &k, inode % 5 ? body(len, 'x') : NULL, len));
        CHECK(xStaticCodedCacheBytes(c) <= bound);
    }
    xStaticCodedCacheDestroy(c);
}

static void test_the_least_recently_used_goes_first(void) {
    size_t each = sizeof(xStaticCoded) + 100;
    xStaticCodedCache *c = xStaticCodedCacheCreate(3 * each);
    keep(c, 1, 100);
    keep(c, 2, 100);
    keep(c, 3, 100);
    CHECK(has(c, 1)); /* 1 is now the most recently used: 2 is the oldest */
    keep(c, 4, 100);
    CHECK(!has(c, 2));
    CHECK(has(c, 1) && has(c, 3) && has(c, 4));
    keep(c, 5, 2 * 100 + sizeof(xStaticCoded)); /* two entries' worth: 3 and 1 go, the oldest */
    CHECK(!has(c, 3) && !has(c, 1));
    CHECK(has(c, 4) && has(c, 5));
    xStaticCodedCacheDestroy(c);
}

static void test_another_version_of_a_file_is_dropped_when_asked_for(void) {
    xStaticCodedCache *c = xStaticCodedCacheCreate(1 << 20);
    xStaticCodedKey old = key(9, 100, GZIP), changed = key(9, 200, GZIP), resized = key(9, 100, GZIP);
    resized.size = 4097;
    xStaticCodedPut(xStaticCodedKeep(c, &old, body(500, 'o'), 500));
    size_t held = xStaticCodedCacheBytes(c);
    CHECK(xStaticCodedFind(c, &changed) == NULL);
    CHECK_EQ_INT(xStaticCodedCacheCount(c), 0);
    CHECK_EQ_INT(xStaticCodedCacheBytes(c), 0);
    CHECK(held > 0);
    CHECK(xStaticCodedFind(c, &old) == NULL);
    xStaticCodedPut(xStaticCodedKeep(c, &changed, body(300, 'n'), 300));
    CHECK(xStaticCodedFind(c, &resized) == NULL); /* a size change is another version too */
    CHECK_EQ_INT(xStaticCodedCacheCount(c), 0);
    xStaticCodedCacheDestroy(c);
}

static void test_a_body_being_sent_outlives_its_eviction(void) {
    size_t each = sizeof(xStaticCoded) + 256;
    xStaticCodedCache *c = xStaticCodedCacheCreate(each);
    xStaticCodedKey a = key(1, 0, GZIP);
    xStaticCoded *sending = xStaticCodedKeep(c, &a, body(256, 'a'), 256);
    keep(c, 2, 256); /* evicts a, which the response still holds */
    CHECK(!has(c, 1));
    CHECK(has(c, 2));
    CHECK(((char *)sending->bytes)[255] == 'a'); /* ASan: no use after free */
    xStaticCodedPut(sending);
    xStaticCodedKey b = key(2, 0, GZIP);
    xStaticCoded *held = xStaticCodedFind(c, &b);
    CHECK(held != NULL);
    xStaticCodedCacheDestroy(c); /* the cache goes first: held lives on */
    CHECK(held && ((char *)held->bytes)[0] == 2);
    if (held) xStaticCodedPut(held);
}

static void test_what_does_not_fit_is_kept_nowhere(void) {
    xStaticCodedCache *c = xStaticCodedCacheCreate(1000);
    keep(c, 1, 10);
    xStaticCodedKey big = key(2, 0, GZIP);
    xStaticCoded *e = xStaticCodedKeep(c, &big, body(5000, 'b'), 5000);
    CHECK(e && e->len == 5000);
    CHECK(has(c, 1)); /* nothing was dropped for it */
    CHECK(!has(c, 2));
    xStaticCodedPut(e);
    xStaticCodedKey k = key(3, 0, BROTLI);
    e = xStaticCodedKeep(NULL, &k, body(64, 'n'), 64); /* no cache: per request */
    CHECK(e && e->len == 64);
    xStaticCodedPut(e);
    CHECK(xStaticCodedCacheBytes(c) <= 1000);
    xStaticCodedCacheDestroy(c);
}

static void test_a_body_that_saves_nothing_is_remembered(void) {
    xStaticCodedCache *c = xStaticCodedCacheCreate(1 << 20);
    xStaticCodedKey k = key(4, 0, BROTLI);
    xStaticCodedPut(xStaticCodedKeep(c, &k, NULL, 12345));
    xStaticCoded *e = xStaticCodedFind(c, &k);
    CHECK(e && e->bytes == NULL && e->len == 0);
    if (e) xStaticCodedPut(e);
    CHECK_EQ_INT(xStaticCodedCacheBytes(c), sizeof(xStaticCoded));
    xStaticCodedCacheDestroy(c);
}

static void test_many_entries_stay_findable_as_the_table_grows(void) {
    xStaticCodedCache *c = xStaticCodedCacheCreate(64u << 20);
    for (uint64_t inode = 1; inode <= 5000; inode++) keep(c, inode, 8);
    CHECK_EQ_INT(xStaticCodedCacheCount(c), 5000);
    size_t found = 0;
    for (uint64_t inode = 1; inode <= 5000; inode++) found += has(c, inode);
    CHECK_EQ_INT(found, 5000);
    xStaticCodedCacheDestroy(c);
}

int main(void) {
    RUN(test_a_kept_body_is_found_by_its_file_and_coding);
    RUN(test_the_key_is_the_file_s_identity);
    RUN(test_the_bound_holds_however_many_files_come);
    RUN(test_the_least_recently_used_goes_first);
    RUN(test_another_version_of_a_file_is_dropped_when_asked_for);
    RUN(test_a_body_being_sent_outlives_its_eviction);
    RUN(test_what_does_not_fit_is_kept_nowhere);
    RUN(test_a_body_that_saves_nothing_is_remembered);
    RUN(test_many_entries_stay_findable_as_the_table_grows);
    return CHECK_SUMMARY();
}
