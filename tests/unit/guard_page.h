/* guard_page.h — memory whose end is followed by an unreadable page.
 *
 * Tests copy an input so that it ends exactly at the returned pointer: a
 * parser that reads even one byte past the input's length then crashes,
 * instead of silently reading whatever happens to follow. */
#ifndef XK_TESTS_GUARD_PAGE_H
#define XK_TESTS_GUARD_PAGE_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Maps at least bytes readable bytes followed by a PROT_NONE page and returns
 * one past the last readable byte. Exits the test on failure. */
static char *guard_page_map(size_t bytes) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t readable = (bytes + page - 1) / page * page;
    char *p = mmap(NULL, readable + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || mprotect(p + readable, page, PROT_NONE) != 0) {
        perror("mmap");
        exit(2);
    }
    return p + readable;
}

#endif
