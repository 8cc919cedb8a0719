/* poller.c — picks a loop's I/O backend: the setting, else XK_IO, else
 * io_uring; epoll wherever io_uring is refused, said once per process. */
#include "xbase/io/poller.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xbase/log.h>

/* Workers run a loop each; the first says which backend runs. */
static atomic_bool announced;

void xPollerAnnounce(const xPoller *poller) {
    if (atomic_exchange(&announced, true)) return;
    if (*poller->why)
        XLOG_INFO("io: %s (%s)", poller->ops->name, poller->why);
    else
        XLOG_INFO("io: %s", poller->ops->name);
}

/* The backend the environment asks for; an unknown value is reported in why
 * and asks for nothing. */
static xIoBackend from_environment(char *why, size_t why_len) {
    const char *env = getenv("XK_IO");
    if (!env || !*env) return XIO_DEFAULT;
    if (strcmp(env, "io_uring") == 0) return XIO_URING;
    if (strcmp(env, "epoll") == 0) return XIO_EPOLL;
    snprintf(why, why_len, "XK_IO=%.32s is neither io_uring nor epoll; ignored", env);
    return XIO_DEFAULT;
}

xPoller *xPollerCreate(xIoBackend want) {
    char why[160] = "";
    bool by_setting = want != XIO_DEFAULT;
    if (!by_setting) want = from_environment(why, sizeof why);
    xPoller *poller = NULL;
    if (want != XIO_EPOLL) {
        char refused[96] = "";
        poller = xPollerUringCreate(refused, sizeof refused);
        if (!poller) {
            size_t used = strlen(why);
            snprintf(why + used, sizeof why - used, "%s%s", used ? "; " : "", refused);
        }
    } else {
        snprintf(why, sizeof why, "%s", by_setting ? "chosen by the settings" : "XK_IO=epoll");
    }
    if (!poller) poller = xPollerEpollCreate();
    if (poller) snprintf(poller->why, sizeof poller->why, "%s", why);
    return poller;
}
