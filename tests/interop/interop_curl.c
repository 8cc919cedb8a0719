/* interop_curl.c — libcurl's multi-socket API driven by an xKit loop (on the
 * backend XK_IO names) through curl_on_xkit.h: GETS concurrent downloads of
 * BASE/blob?i=I&n=N, each body checked byte for byte against the pattern the
 * server writes, and one upload of POST_BYTES to BASE/echo, whose echoed body
 * is checked too, all at once. Prints what went wrong and exits 1, or "ok". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "curl_on_xkit.h"

/* What the server writes for transfer i, byte j (test_interop_curl.py's pattern). */
static unsigned char pattern(unsigned i, size_t j) { return (unsigned char)((i * 31u + j) % 251u); }

typedef struct Transfer {
    unsigned index; /* a download's i; the upload's is ~0u */
    size_t want;    /* bytes the body must have */
    size_t got;
    int wrong_at; /* the first byte off the pattern, or -1 */
    const unsigned char *upload;
} Transfer;

static xEventLoop *loop;
static int pending, failures;

static size_t on_body(char *data, size_t size, size_t n, void *arg) {
    Transfer *t = arg;
    for (size_t k = 0; k < n; k++) {
        size_t j = t->got + k;
        unsigned char want = t->upload ? (j < t->want ? t->upload[j] : 0) : pattern(t->index, j);
        if (t->wrong_at < 0 && (unsigned char)data[k] != want) t->wrong_at = (int)j;
    }
    t->got += n;
    return n;
}

static void on_done(void *arg, CURLMsg *msg) {
    Transfer *t;
    long status = 0;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
    curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
    const char *what = t->upload ? "upload" : "download";
    if (msg->data.result != CURLE_OK) {
        printf("%s %u: %s\n", what, t->index, curl_easy_strerror(msg->data.result));
        failures++;
    } else if (status != 200 || t->got != t->want || t->wrong_at >= 0) {
        printf("%s %u: status %ld, %zu of %zu bytes, first wrong byte %d\n", what, t->index, status, t->got,
               t->want, t->wrong_at);
        failures++;
    }
    CURLM *multi = arg;
    curl_multi_remove_handle(multi, msg->easy_handle);
    curl_easy_cleanup(msg->easy_handle);
    if (--pending == 0) xEventLoopStop(loop);
}

static void give_up(xEventLoop *l, xTimer *timer, void *arg) {
    printf("gave up with %d transfers unfinished\n", pending);
    failures++;
    xEventLoopStop(l);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s BASE_URL GETS POST_BYTES\n", argv[0]);
        return 2;
    }
    const char *base = argv[1];
    unsigned gets = (unsigned)atoi(argv[2]);
    size_t post_bytes = (size_t)atol(argv[3]);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    loop = xEventLoopCreate();
    CURLM *multi = curl_multi_init();
    xCurlLoop cl;
    xCurlLoopInit(&cl, loop, multi, on_done, multi);

    Transfer *transfers = calloc(gets + 1, sizeof *transfers);
    unsigned char *upload = malloc(post_bytes);
    for (size_t j = 0; j < post_bytes; j++) upload[j] = (unsigned char)(j * 7 % 253);
    char url[512];
    for (unsigned i = 0; i <= gets; i++) {
        Transfer *t = &transfers[i];
        CURL *easy = curl_easy_init();
        t->wrong_at = -1;
        if (i < gets) {
            t->index = i;
            t->want = 1000 + (size_t)i * 37813 % 400000; /* 1 kB to 400 kB */
            snprintf(url, sizeof url, "%s/blob?i=%u&n=%zu", base, i, t->want);
        } else {
            t->index = ~0u;
            t->want = post_bytes;
            t->upload = upload;
            snprintf(url, sizeof url, "%s/echo", base);
            curl_easy_setopt(easy, CURLOPT_POSTFIELDS, (const char *)upload);
            curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)post_bytes);
        }
        curl_easy_setopt(easy, CURLOPT_URL, url);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, t);
        curl_easy_setopt(easy, CURLOPT_PRIVATE, t);
        curl_multi_add_handle(multi, easy);
        pending++;
    }
    xTimer deadline;
    xTimerInit(&deadline, give_up, NULL);
    xTimerStart(loop, &deadline, 60000);
    xEventLoopRun(loop);
    xTimerStop(loop, &deadline);
    const char *backend = xEventLoopBackend(loop);

    curl_multi_cleanup(multi);
    xTimerStop(loop, &cl.timer);
    xEventLoopDestroy(loop);
    curl_global_cleanup();
    free(upload);
    free(transfers);
    printf("%s: %u downloads and a %zu-byte upload on %s\n", failures ? "FAILED" : "ok", gets, post_bytes,
           backend);
    return failures ? 1 : 0;
}
