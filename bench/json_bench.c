/* json_bench — what reading the arena's JSON costs: xKit's reader
 * (<xbase/json.h>) against jansson on the request bodies a handler parses and
 * on the dataset the arena entry loads.
 *
 *   json_bench [--data DIR] [--runs N] [--seconds S] [--callgrind]
 *
 * Payloads: the production-stack profile's POST /api/items/{id} body (the
 * arena's validation sends {"name":"validate-updated","price":777,"quantity":99}),
 * the baseline profile's POST /baseline11 body (20), and DIR/dataset.json
 * (default ../shared/arena/data, as make arena). Each parse is what a handler
 * pays: parse, read the fields it needs, free. For the item, its three
 * fields; for 20, the integer; for the dataset, every field of every item, as
 * arena/main.c reads them. Parsers:
 *   xkit        xJsonDocInit(doc, NULL, 0), xJsonDocParse, the walk, xJsonDocFree:
 *               one allocation per parse
 *   xkit-stack  the same with 4 KiB of the caller's stack as the document's memory
 *               (no allocation for a body that fits)
 *   jansson     json_loadb(JSON_DECODE_ANY), the walk with jansson's getters,
 *               json_decref: the least any reader built on jansson costs
 *
 * CPU time: each (payload, parser) runs for S seconds (default 0.3) of this
 * process's CPU time, N times (default 5), and the median ns per parse is
 * printed, with jansson ÷ xkit. Pin it: taskset -c 1 build/bench/json_bench.
 *
 * --callgrind runs each case again under valgrind's callgrind (instructions,
 * which the machine's noise does not move), counting only inside the timed
 * loop (--toggle-collect), and prints instructions per parse. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include <xbase/json.h>

/* ---- Payloads ---- */

typedef struct Payload {
    const char *name, *what;
    char *bytes;
    size_t len;
    bool (*walk_xkit)(const xJsonValue *root);
    bool (*walk_jansson)(json_t *root);
} Payload;

/* Keeps the walks' results alive, so the compiler cannot drop them. */
static volatile int64_t sink;

static bool item_update_xkit(const xJsonValue *root) {
    xStr name;
    int64_t price, quantity;
    if (xJsonGetString(xJsonObjectGet(root, "name"), &name) != XOK ||
        xJsonGetInt64(xJsonObjectGet(root, "price"), &price) != XOK ||
        xJsonGetInt64(xJsonObjectGet(root, "quantity"), &quantity) != XOK) {
        return false;
    }
    sink += (int64_t)name.len + price + quantity;
    return true;
}

static bool item_update_jansson(json_t *root) {
    json_t *name = json_object_get(root, "name"), *price = json_object_get(root, "price"),
           *quantity = json_object_get(root, "quantity");
    if (!json_is_string(name) || !json_is_integer(price) || !json_is_integer(quantity)) return false;
    sink += (int64_t)json_string_length(name) + json_integer_value(price) + json_integer_value(quantity);
    return true;
}

static bool number_xkit(const xJsonValue *root) {
    int64_t v;
    if (xJsonGetInt64(root, &v) != XOK) return false;
    sink += v;
    return true;
}

static bool number_jansson(json_t *root) {
    if (!json_is_integer(root)) return false;
    sink += json_integer_value(root);
    return true;
}

static bool int_field_xkit(const xJsonValue *obj, const char *name, int64_t *sum) {
    int64_t v;
    if (xJsonGetInt64(xJsonObjectGet(obj, name), &v) != XOK) return false;
    *sum += v;
    return true;
}

static bool string_field_xkit(const xJsonValue *obj, const char *name, int64_t *sum) {
    xStr v;
    if (xJsonGetString(xJsonObjectGet(obj, name), &v) != XOK) return false;
    *sum += (int64_t)v.len;
    return true;
}

static bool dataset_xkit(const xJsonValue *root) {
    if (xJsonTypeOf(root) != XJSON_ARRAY) return false;
    int64_t sum = 0;
    xJsonIter items;
    const xJsonValue *item;
    xJsonIterInit(&items, root);
    while (xJsonIterNext(&items, NULL, &item)) {
        const xJsonValue *tags = xJsonObjectGet(item, "tags"), *rating = xJsonObjectGet(item, "rating");
        bool active;
        if (!int_field_xkit(item, "id", &sum) || !int_field_xkit(item, "price", &sum) ||
            !int_field_xkit(item, "quantity", &sum) || !string_field_xkit(item, "name", &sum) ||
            !string_field_xkit(item, "category", &sum) || !int_field_xkit(rating, "score", &sum) ||
            !int_field_xkit(rating, "count", &sum) ||
            xJsonGetBool(xJsonObjectGet(item, "active"), &active) != XOK ||
            xJsonTypeOf(tags) != XJSON_ARRAY) {
            return false;
        }
        xJsonIter it;
        const xJsonValue *tag;
        xJsonIterInit(&it, tags);
        while (xJsonIterNext(&it, NULL, &tag)) {
            xStr s;
            if (xJsonGetString(tag, &s) != XOK) return false;
            sum += (int64_t)s.len;
        }
        sum += active;
    }
    sink += sum;
    return true;
}

static bool int_field_jansson(json_t *obj, const char *name, int64_t *sum) {
    json_t *v = json_object_get(obj, name);
    if (!json_is_integer(v)) return false;
    *sum += json_integer_value(v);
    return true;
}

static bool string_field_jansson(json_t *obj, const char *name, int64_t *sum) {
    json_t *v = json_object_get(obj, name);
    if (!json_is_string(v)) return false;
    *sum += (int64_t)json_string_length(v);
    return true;
}

static bool dataset_jansson(json_t *root) {
    if (!json_is_array(root)) return false;
    int64_t sum = 0;
    for (size_t i = 0; i < json_array_size(root); i++) {
        json_t *item = json_array_get(root, i), *tags = json_object_get(item, "tags"),
               *rating = json_object_get(item, "rating"), *active = json_object_get(item, "active");
        if (!int_field_jansson(item, "id", &sum) || !int_field_jansson(item, "price", &sum) ||
            !int_field_jansson(item, "quantity", &sum) || !string_field_jansson(item, "name", &sum) ||
            !string_field_jansson(item, "category", &sum) || !int_field_jansson(rating, "score", &sum) ||
            !int_field_jansson(rating, "count", &sum) || !json_is_boolean(active) || !json_is_array(tags)) {
            return false;
        }
        for (size_t t = 0; t < json_array_size(tags); t++) {
            json_t *tag = json_array_get(tags, t);
            if (!json_is_string(tag)) return false;
            sum += (int64_t)json_string_length(tag);
        }
        sum += json_is_true(active);
    }
    sink += sum;
    return true;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *data = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)size + 1))) {
        *len = fread(data, 1, (size_t)size, f);
        if (*len != (size_t)size) {
            free(data);
            data = NULL;
        }
    }
    fclose(f);
    return data;
}

/* ---- Parsers ---- */

enum { XKIT, XKIT_STACK, JANSSON, NUM_PARSERS };
static const char *const PARSER_NAMES[NUM_PARSERS] = {"xkit", "xkit-stack", "jansson"};

static bool parse_xkit(const Payload *pl, void *memory, size_t size) {
    xJsonDoc doc;
    xJsonDocInit(&doc, memory, size);
    bool ok = xJsonDocParse(&doc, pl->bytes, pl->len) == XOK && pl->walk_xkit(xJsonDocRoot(&doc));
    xJsonDocFree(&doc);
    return ok;
}

static bool parse_once(const Payload *pl, int parser) {
    switch (parser) {
    case XKIT: return parse_xkit(pl, NULL, 0);
    case XKIT_STACK: {
        _Alignas(16) char memory[4096];
        return parse_xkit(pl, memory, sizeof memory);
    }
    default: {
        json_t *root = json_loadb(pl->bytes, pl->len, JSON_DECODE_ANY, NULL);
        bool ok = root && pl->walk_jansson(root);
        json_decref(root);
        return ok;
    }
    }
}

/* The loop callgrind counts in (--toggle-collect=measure): not inlined, so it
 * is one function in its output. */
__attribute__((noinline, noclone)) static bool measure(const Payload *pl, int parser, long iterations) {
    bool ok = true;
    for (long i = 0; i < iterations; i++) ok &= parse_once(pl, parser);
    return ok;
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* CPU ns per parse over at least seconds of CPU time. */
static double ns_per_parse(const Payload *pl, int parser, double seconds) {
    long batch = 1;
    for (;;) { /* a batch long enough (10 ms) that reading the clock is noise */
        double t0 = cpu_seconds();
        measure(pl, parser, batch);
        if (cpu_seconds() - t0 >= 0.01) break;
        batch *= 2;
    }
    long done = 0;
    double t0 = cpu_seconds(), elapsed;
    do {
        measure(pl, parser, batch);
        done += batch;
    } while ((elapsed = cpu_seconds() - t0) < seconds);
    return elapsed * 1e9 / (double)done;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Instructions per parse of one case: this program again under callgrind,
 * counting only inside measure(). 0 when valgrind fails. */
static double instructions_per_parse(const char *self, const char *data_dir, int payload, int parser) {
    const long iterations = payload == 2 ? 200 : 5000;
    char out[] = "/tmp/json_bench_cg_XXXXXX";
    int fd = mkstemp(out);
    if (fd < 0) return 0;
    close(fd);
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "valgrind --tool=callgrind --callgrind-out-file=%s --toggle-collect=measure* '%s' --data '%s' "
             "--once %d %d %ld >/dev/null 2>&1",
             out, self, data_dir, payload, parser, iterations);
    double total = 0;
    if (system(cmd) == 0) {
        FILE *f = fopen(out, "r");
        char line[256];
        while (f && fgets(line, sizeof line, f)) {
            if (strncmp(line, "totals:", 7) == 0) total = atof(line + 7);
        }
        if (f) fclose(f);
    }
    unlink(out);
    return total / (double)iterations;
}

int main(int argc, char **argv) {
    const char *data_dir = "../shared/arena/data";
    int runs = 5, once_payload = -1, once_parser = 0;
    long once_iterations = 0;
    double seconds = 0.3;
    bool callgrind = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc) {
            data_dir = argv[++i];
        } else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--callgrind")) {
            callgrind = true;
        } else if (!strcmp(argv[i], "--once") && i + 3 < argc) { /* what --callgrind runs */
            once_payload = atoi(argv[++i]);
            once_parser = atoi(argv[++i]);
            once_iterations = atol(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--data DIR] [--runs N] [--seconds S] [--callgrind]\n", argv[0]);
            return 2;
        }
    }
    if (runs < 1) runs = 1;

    static char item_update[] = "{\"name\":\"validate-updated\",\"price\":777,\"quantity\":99}";
    static char baseline[] = "20";
    Payload payloads[] = {
        {"item-update", "POST /api/items/{id} body (production-stack)", item_update, sizeof item_update - 1,
         item_update_xkit, item_update_jansson},
        {"baseline", "POST /baseline11 body (baseline)", baseline, sizeof baseline - 1, number_xkit,
         number_jansson},
        {"dataset", "dataset.json (the arena entry's data)", NULL, 0, dataset_xkit, dataset_jansson},
    };
    enum { NUM_PAYLOADS = sizeof payloads / sizeof payloads[0] };
    char path[4096];
    snprintf(path, sizeof path, "%s/dataset.json", data_dir);
    if (!(payloads[2].bytes = read_file(path, &payloads[2].len))) {
        fprintf(stderr, "json_bench: %s: %s (--data DIR)\n", path, strerror(errno));
        return 1;
    }
    for (int p = 0; p < NUM_PAYLOADS; p++) { /* both must read each payload, or the figures mean nothing */
        for (int parser = 0; parser < NUM_PARSERS; parser++) {
            if (!parse_once(&payloads[p], parser)) {
                fprintf(stderr, "json_bench: %s cannot read %s\n", PARSER_NAMES[parser], payloads[p].name);
                return 1;
            }
        }
    }
    if (once_payload >= 0) {
        if (once_payload >= NUM_PAYLOADS || once_parser < 0 || once_parser >= NUM_PARSERS) return 2;
        return measure(&payloads[once_payload], once_parser, once_iterations) ? 0 : 1;
    }

    printf("| payload | bytes | xkit ns/parse | xkit-stack ns/parse | jansson ns/parse | jansson ÷ xkit |\n");
    printf("|---|---:|---:|---:|---:|---:|\n");
    for (int p = 0; p < NUM_PAYLOADS; p++) {
        double ns[NUM_PARSERS];
        for (int parser = 0; parser < NUM_PARSERS; parser++) {
            double samples[64];
            int n = runs < 64 ? runs : 64;
            for (int r = 0; r < n; r++) samples[r] = ns_per_parse(&payloads[p], parser, seconds);
            ns[parser] = median(samples, n);
        }
        printf("| %s: %s | %zu | %.0f | %.0f | %.0f | %.1f× |\n", payloads[p].name, payloads[p].what,
               payloads[p].len, ns[XKIT], ns[XKIT_STACK], ns[JANSSON], ns[JANSSON] / ns[XKIT]);
    }
    if (callgrind) {
        printf("\n| payload | xkit instructions/parse | xkit-stack | jansson | jansson ÷ xkit |\n");
        printf("|---|---:|---:|---:|---:|\n");
        for (int p = 0; p < NUM_PAYLOADS; p++) {
            double ir[NUM_PARSERS];
            for (int parser = 0; parser < NUM_PARSERS; parser++) {
                ir[parser] = instructions_per_parse(argv[0], data_dir, p, parser);
            }
            printf("| %s | %.0f | %.0f | %.0f | %.1f× |\n", payloads[p].name, ir[XKIT], ir[XKIT_STACK],
                   ir[JANSSON], ir[XKIT] > 0 ? ir[JANSSON] / ir[XKIT] : 0.0);
        }
    }
    free(payloads[2].bytes);
    return 0;
}
