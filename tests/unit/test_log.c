/* test_log.c — the log on stderr: messages below the runtime level are
 * dropped and the others written as whole lines with their level; threads
 * that log while another changes the level write whole lines, never parts of
 * two (the ThreadSanitizer build runs this too). A handler set with
 * xLogSetHandler takes every message in stderr's place, the library's own
 * included, with its level, file and line; NULL gives stderr back; once a
 * handler is replaced while threads log, it is never called again. Each case
 * logs in a child process whose stderr is a file this one reads. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xbase/event.h>
#include <xbase/log.h>

#include "check.h"

enum { LOGGERS = 3, LINES_EACH = 400 };

/* Runs body in a child process whose stderr is a temporary file, and returns
 * what it wrote there (NUL-terminated; free it). A sanitizer's report lands
 * there too: a child that fails has its output shown and fails the test. */
static char *stderr_of(void (*body)(void), size_t *len) {
    FILE *file = tmpfile();
    CHECK(file != NULL);
    fflush(stderr);
    pid_t child = fork();
    if (child == 0) {
        dup2(fileno(file), STDERR_FILENO);
        body();
        _exit(0);
    }
    int status = -1;
    CHECK(child > 0 && waitpid(child, &status, 0) == child);
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    char *text = calloc(1, (size_t)(size > 0 ? size : 0) + 1);
    rewind(file);
    *len = size > 0 ? fread(text, 1, (size_t)size, file) : 0;
    fclose(file);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child ended with status %d:\n%s", status,
              text);
    return text;
}

static void log_at_each_level(void) {
    xLogSetLevel(XLOG_WARN);
    if (xLogGetLevel() != XLOG_WARN) _exit(1);
    XLOG_INFO("dropped %d", 1);
    XLOG_WARN("kept %d", 2);
    XLOG_ERROR("kept %d", 3);
    xLogSetLevel(XLOG_OFF);
    XLOG_ERROR("dropped %d", 4);
}

static void test_messages_below_the_level_are_dropped(void) {
    size_t len;
    char *text = stderr_of(log_at_each_level, &len);
    CHECK_MSG(strstr(text, "dropped") == NULL, "%s", text);
    CHECK_MSG(strstr(text, " warn test_log.c:") && strstr(text, ": kept 2\n"), "%s", text);
    CHECK_MSG(strstr(text, " error test_log.c:") && strstr(text, ": kept 3\n"), "%s", text);
    free(text);
}

static void *log_lines(void *arg) {
    for (int i = 0; i < LINES_EACH; i++)
        XLOG_ERROR("logger %d line %d of the same length", *(int *)arg, i % 10);
    return NULL;
}

/* "<date> error test_log.c:<n>: logger <k> line <d> of the same length", whole. */
static bool is_whole_line(const char *line, size_t len) {
    char copy[256], date[32];
    if (len >= sizeof copy) return false;
    memcpy(copy, line, len);
    copy[len] = '\0';
    int logger, digit, consumed = 0;
    return sscanf(copy, "%31s error test_log.c:%*d: logger %d line %d of the same length%n", date, &logger,
                  &digit, &consumed) == 3 &&
           consumed == (int)len && strlen(date) == 20 && logger >= 0 && logger < LOGGERS;
}

static void log_from_threads_while_the_level_changes(void) {
    pthread_t threads[LOGGERS];
    int ids[LOGGERS];
    for (int i = 0; i < LOGGERS; i++) {
        ids[i] = i;
        if (pthread_create(&threads[i], NULL, log_lines, &ids[i]) != 0) _exit(1);
    }
    for (int i = 0; i < 1000; i++) xLogSetLevel(i % 2 ? XLOG_ERROR : XLOG_OFF);
    for (int i = 0; i < LOGGERS; i++) pthread_join(threads[i], NULL);
}

static void test_threads_log_whole_lines_while_the_level_changes(void) {
    size_t len;
    char *text = stderr_of(log_from_threads_while_the_level_changes, &len);
    int lines = 0;
    for (const char *line = text, *end; line < text + len; line = end + 1) {
        end = memchr(line, '\n', (size_t)(text + len - line));
        CHECK_MSG(end && is_whole_line(line, (size_t)(end - line)), "%.*s", (int)(end ? end - line : 80),
                  line);
        if (!end) break;
        lines++;
    }
    CHECK(lines <= LOGGERS * LINES_EACH);
    free(text);
}

/* A handler that writes what it was given on stderr, marked, so the parent
 * tells its lines from the default ones (which start with the date). */
static void mark(xLogLevel level, const char *file, int line, const char *message, void *arg) {
    fprintf(stderr, "%s level=%d file=%s line=%s message=[%s]\n", (const char *)arg, (int)level, file,
            line > 0 ? "yes" : "no", message);
}

static void stop_loop(xEventLoop *loop, void *arg) { xEventLoopStop(loop); }

static void log_through_a_handler(void) {
    xLogSetHandler(mark, "HANDLED");
    xLogSetLevel(XLOG_INFO);
    XLOG_DEBUG("dropped %d", 1);
    XLOG_WARN("kept %d", 2);
    /* The library's own message: the first loop to run names its backend. */
    xEventLoop *loop = xEventLoopCreate();
    if (!loop || xEventLoopPost(loop, stop_loop, NULL) != XOK || xEventLoopRun(loop) != XOK) _exit(1);
    xEventLoopDestroy(loop);
    xLogSetHandler(NULL, NULL);
    XLOG_ERROR("back on stderr %d", 3);
}

static void test_a_handler_takes_the_messages_stderr_would(void) {
    size_t len;
    char *text = stderr_of(log_through_a_handler, &len);
    CHECK_MSG(strstr(text, "dropped") == NULL, "%s", text);
    CHECK_MSG(strncmp(text, "HANDLED level=2 file=test_log.c line=yes message=[kept 2]\n", 58) == 0, "%s",
              text);
    CHECK_MSG(strstr(text, "\nHANDLED level=1 file=poller.c line=yes message=[io: ") != NULL, "%s", text);
    const char *last = strstr(text, " error test_log.c:");
    CHECK_MSG(last && strstr(last, ": back on stderr 3\n") && !strstr(last, "HANDLED"), "%s", text);
    free(text);
}

static atomic_long calls_a, calls_b;

static void count_a(xLogLevel level, const char *file, int line, const char *message, void *arg) {
    atomic_fetch_add(&calls_a, 1);
}

static void count_b(xLogLevel level, const char *file, int line, const char *message, void *arg) {
    atomic_fetch_add(&calls_b, 1);
}

static void *log_until_told(void *arg) {
    while (!atomic_load((atomic_bool *)arg)) XLOG_ERROR("busy");
    return NULL;
}

static void replace_a_handler_while_threads_log(void) {
    pthread_t threads[LOGGERS];
    atomic_bool done = false;
    xLogSetHandler(count_a, NULL);
    for (int i = 0; i < LOGGERS; i++)
        if (pthread_create(&threads[i], NULL, log_until_told, &done) != 0) _exit(1);
    while (atomic_load(&calls_a) < 1000) sched_yield();
    xLogSetHandler(count_b, NULL);
    long a_after = atomic_load(&calls_a);
    while (atomic_load(&calls_b) < 1000) sched_yield();
    atomic_store(&done, true);
    for (int i = 0; i < LOGGERS; i++) pthread_join(threads[i], NULL);
    xLogSetHandler(NULL, NULL);
    if (atomic_load(&calls_a) != a_after) {
        fprintf(stderr, "the old handler was called %ld times after it was replaced\n",
                atomic_load(&calls_a) - a_after);
        _exit(1);
    }
}

static void test_a_replaced_handler_is_never_called_again(void) {
    size_t len;
    char *text = stderr_of(replace_a_handler_while_threads_log, &len);
    CHECK_MSG(len == 0, "%s", text); /* every message went to a handler */
    free(text);
}

int main(void) {
    RUN(test_messages_below_the_level_are_dropped);
    RUN(test_threads_log_whole_lines_while_the_level_changes);
    RUN(test_a_handler_takes_the_messages_stderr_would);
    RUN(test_a_replaced_handler_is_never_called_again);
    return CHECK_SUMMARY();
}
