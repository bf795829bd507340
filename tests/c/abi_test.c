/* Drives every function of floe.h from C, including the misuse the header says is
 * handled, so the ABI can be run under AddressSanitizer + UBSan and valgrind memcheck
 * (`make abi-test`). Each check prints what failed and the program exits non-zero;
 * a sanitizer or valgrind finding fails the run on its own.
 *
 * Usage: abi_test <empty warehouse folder>
 * It writes to the embedded catalog (local folder + SQLite): no services needed. */

#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "floe.h"

static int failures;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            failures++;                                                    \
        }                                                                  \
    } while (0)

/* A batch built from NUL-terminated strings: one buffer plus count + 1 offsets. */
struct packed {
    uint8_t *data;
    size_t *offsets;
};

static struct packed pack(const char *const *items, size_t count) {
    struct packed p;
    size_t total = 0;
    p.offsets = malloc((count + 1) * sizeof(size_t));
    for (size_t i = 0; i < count; i++) total += strlen(items[i]);
    p.data = malloc(total > 0 ? total : 1);
    p.offsets[0] = 0;
    for (size_t i = 0; i < count; i++) {
        size_t len = strlen(items[i]);
        memcpy(p.data + p.offsets[i], items[i], len);
        p.offsets[i + 1] = p.offsets[i] + len;
    }
    return p;
}

static void unpack(struct packed p) {
    free(p.data);
    free(p.offsets);
}

static const char *message_of(floe_error *err) { return floe_error_message(err); }

/* Frees `err` after printing it when a check failed; returns its status. */
static floe_status take_status(floe_error *err) {
    floe_status status = floe_error_status(err);
    floe_error_free(err);
    return status;
}

static atomic_long log_lines;

static void count_log_line(uint32_t level, const uint8_t *message, size_t len, void *user_data) {
    (void)level;
    (void)message;
    (void)len;
    atomic_fetch_add((atomic_long *)user_data, 1);
}

/* A writer of `table` in `warehouse`, with `commit` (a JSON object) as its commit settings. */
static floe_writer *open_table_writer(const char *warehouse, const char *table,
                                      const char *commit) {
    char config[4096];
    snprintf(config, sizeof config,
             "{\"catalog\": {\"warehouse\": \"%s\"}, \"namespace\": \"abi\", \"table\": \"%s\","
             " \"schema_evolution\": {\"enabled\": true}, \"commit\": %s}",
             warehouse, table, commit);
    floe_writer *writer = NULL;
    floe_error *err = NULL;
    floe_status status = floe_writer_open((const uint8_t *)config, strlen(config), &writer, &err);
    CHECK(status == FLOE_STATUS_OK, "open %s: %s", table, message_of(err));
    floe_error_free(err);
    return writer;
}

static floe_writer *open_writer(const char *warehouse) {
    return open_table_writer(warehouse, "events", "{}");
}

static void check_version_config_and_errors(void) {
    CHECK(floe_abi_version() == FLOE_ABI_VERSION, "abi %u", floe_abi_version());

    const char *defaults = floe_config_defaults();
    CHECK(defaults != NULL && strstr(defaults, "\"commit\"") != NULL, "defaults: %s",
          defaults ? defaults : "(null)");

    const char *good = "{\"namespace\": \"a\", \"table\": \"b\"}";
    floe_error *err = NULL;
    CHECK(floe_config_check((const uint8_t *)good, strlen(good), &err) == FLOE_STATUS_OK,
          "check good: %s", message_of(err));
    CHECK(err == NULL, "an error was stored on success");

    const char *bad =
        "{\"commit\": {\"max_snapshots\": 0}, \"storage\": {\"gcp_cloud_storage\": "
        "{\"credentials_type\": \"service_account\"}}}";
    CHECK(floe_config_check((const uint8_t *)bad, strlen(bad), &err) == FLOE_STATUS_CONFIG,
          "check bad");
    CHECK(err != NULL && floe_error_status(err) == FLOE_STATUS_CONFIG, "bad config's error");
    CHECK(err != NULL && strchr(message_of(err), '\n') != NULL, "one problem per line: %s",
          message_of(err));
    floe_error_free(err);

    /* Misuse the header says is handled. */
    CHECK(floe_config_check(NULL, 3, NULL) == FLOE_STATUS_INVALID_ARGUMENT, "NULL config");
    const uint8_t not_utf8[] = {'{', 0xff, '}'};
    err = NULL;
    floe_config_check(not_utf8, 3, &err);
    CHECK(take_status(err) == FLOE_STATUS_INVALID_ARGUMENT, "config that is not UTF-8");
    CHECK(floe_error_status(NULL) == FLOE_STATUS_INTERNAL, "status of NULL");
    CHECK(strcmp(floe_error_message(NULL), "") == 0, "message of NULL");
    floe_error_free(NULL);
}

static void check_open_misuse(const char *warehouse) {
    floe_writer *writer = NULL;
    floe_error *err = NULL;
    const char *config = "{\"catalog\": {\"url\": \"ftp://nope\"}}";
    CHECK(floe_writer_open((const uint8_t *)config, strlen(config), &writer, &err) ==
              FLOE_STATUS_CONFIG,
          "bad catalog url");
    CHECK(writer == NULL, "writer_out written on failure");
    CHECK(take_status(err) == FLOE_STATUS_CONFIG, "bad url's error");

    CHECK(floe_writer_open(NULL, 0, &writer, NULL) == FLOE_STATUS_INVALID_ARGUMENT, "NULL config");
    char good[1024];
    snprintf(good, sizeof good, "{\"catalog\": {\"warehouse\": \"%s\"}}", warehouse);
    CHECK(floe_writer_open((const uint8_t *)good, strlen(good), NULL, NULL) ==
              FLOE_STATUS_INVALID_ARGUMENT,
          "NULL writer_out");
    floe_writer_free(NULL);
}

static void check_log_callback(void) {
    floe_error *err = NULL;
    CHECK(floe_set_log_callback(count_log_line, &log_lines, 3, &err) == FLOE_STATUS_OK,
          "first log callback: %s", message_of(err));
    floe_error_free(err);
    err = NULL;
    CHECK(floe_set_log_callback(count_log_line, &log_lines, 3, &err) ==
              FLOE_STATUS_INVALID_ARGUMENT,
          "second log callback accepted");
    floe_error_free(err);
}

/* Writes `count` messages; returns the result (caller frees) or NULL on failure. */
static floe_batch_result *write_all(floe_writer *writer, const floe_batch *batch,
                                    const floe_cancel_token *cancel, floe_status *status_out) {
    floe_batch_result *result = NULL;
    floe_error *err = NULL;
    floe_status status = floe_writer_write(writer, batch, cancel, &result, &err);
    if (status_out) *status_out = status;
    if (status != FLOE_STATUS_OK) {
        CHECK(result == NULL, "result_out written on failure");
        CHECK(err != NULL && floe_error_status(err) == status, "error status %u", status);
    } else {
        CHECK(err == NULL, "an error was stored on success");
    }
    floe_error_free(err);
    return result;
}

/* Two rows with exactly-once positions, the second's source not UTF-8. */
static floe_batch_result *write_unreadable_source(floe_writer *writer, floe_status *status) {
    const char *rows[] = {"{\"id\": 20}", "{\"id\": 21}"};
    const char *sources[] = {"topic/0", "\xff\xfe"};
    int64_t positions[] = {1, 2};
    struct packed r = pack(rows, 2), src = pack(sources, 2);
    floe_batch batch = {0};
    batch.data = r.data;
    batch.offsets = r.offsets;
    batch.count = 2;
    batch.sources = src.data;
    batch.source_offsets = src.offsets;
    batch.message_offsets = positions;
    floe_batch_result *result = write_all(writer, &batch, NULL, status);
    unpack(r);
    unpack(src);
    return result;
}

static void check_writes(floe_writer *writer) {
    /* Per-message outcome: message 1 is not JSON, 2 is a zero-length message. */
    const char *messages[] = {"{\"id\": 1, \"name\": \"a\"}", "{\"id\": ", "",
                              "{\"id\": 4, \"name\": \"d\"}"};
    struct packed p = pack(messages, 4);
    floe_batch batch = {0};
    batch.data = p.data;
    batch.offsets = p.offsets;
    batch.count = 4;
    floe_status status;
    floe_batch_result *result = write_all(writer, &batch, NULL, &status);
    CHECK(status == FLOE_STATUS_OK, "mixed batch status %u", status);
    CHECK(floe_batch_result_rows(result) == 2, "rows %zu", floe_batch_result_rows(result));
    CHECK(floe_batch_result_snapshots(result) == 1, "snapshots %zu",
          floe_batch_result_snapshots(result));
    CHECK(floe_batch_result_failed_count(result) == 2, "failed %zu",
          floe_batch_result_failed_count(result));
    CHECK(floe_batch_result_failure(result, 0) == NULL, "message 0 failed");
    CHECK(floe_error_status(floe_batch_result_failure(result, 1)) == FLOE_STATUS_DATA,
          "message 1: %s", message_of((floe_error *)floe_batch_result_failure(result, 1)));
    CHECK(floe_error_status(floe_batch_result_failure(result, 2)) == FLOE_STATUS_DATA,
          "zero-length message: %s",
          message_of((floe_error *)floe_batch_result_failure(result, 2)));
    CHECK(floe_batch_result_failure(result, 99) == NULL, "index out of range");
    floe_batch_result_free(result);
    unpack(p);

    /* Per-message tables: an empty entry means the config's table; one that is not
     * UTF-8 fails its message alone. */
    const char *rows[] = {"{\"id\": 10}", "{\"id\": 11}", "{\"id\": 12}", "{\"id\": 13}"};
    const char *tables[] = {"other", "", "other", "\xff\xfe"};
    struct packed r = pack(rows, 4), t = pack(tables, 4);
    floe_batch routed = {0};
    routed.data = r.data;
    routed.offsets = r.offsets;
    routed.count = 4;
    routed.tables = t.data;
    routed.table_offsets = t.offsets;
    result = write_all(writer, &routed, NULL, &status);
    CHECK(status == FLOE_STATUS_OK, "routed status %u", status);
    CHECK(floe_batch_result_rows(result) == 3, "routed rows %zu", floe_batch_result_rows(result));
    CHECK(floe_batch_result_snapshots(result) == 2, "routed snapshots %zu",
          floe_batch_result_snapshots(result));
    CHECK(floe_batch_result_failed_count(result) == 1 &&
              floe_error_status(floe_batch_result_failure(result, 3)) == FLOE_STATUS_DATA,
          "a table that is not UTF-8: %s",
          message_of((floe_error *)floe_batch_result_failure(result, 3)));
    floe_batch_result_free(result);
    unpack(r);
    unpack(t);

    /* Without exactly-once, positions are not used: a source that is not UTF-8 fails
     * nothing (hosts may send them whatever the config). */
    result = write_unreadable_source(writer, &status);
    CHECK(status == FLOE_STATUS_OK, "sourced status %u", status);
    CHECK(floe_batch_result_failed_count(result) == 0 && floe_batch_result_rows(result) == 2,
          "a source that is not UTF-8, exactly-once off: %s",
          floe_batch_result_failed_count(result)
              ? message_of((floe_error *)floe_batch_result_failure(result, 1))
              : "rows missing");
    floe_batch_result_free(result);

    /* A new field evolves the schema, which floe logs at info level. */
    const char *evolving[] = {"{\"id\": 5, \"name\": \"e\", \"extra\": true}"};
    struct packed e = pack(evolving, 1);
    floe_batch evolve = {0};
    evolve.data = e.data;
    evolve.offsets = e.offsets;
    evolve.count = 1;
    result = write_all(writer, &evolve, NULL, &status);
    CHECK(status == FLOE_STATUS_OK && floe_batch_result_rows(result) == 1, "evolving write %u",
          status);
    floe_batch_result_free(result);
    unpack(e);
    CHECK(atomic_load(&log_lines) > 0, "the log callback saw no line of the schema's evolution");

    /* An empty batch commits nothing. */
    floe_batch empty = {0};
    result = write_all(writer, &empty, NULL, &status);
    CHECK(status == FLOE_STATUS_OK, "empty batch status %u", status);
    CHECK(floe_batch_result_rows(result) == 0 && floe_batch_result_snapshots(result) == 0,
          "empty batch committed something");
    floe_batch_result_free(result);

    /* Only zero-length messages, with no data buffer at all. */
    size_t zero_offsets[] = {0, 0, 0};
    floe_batch zeros = {0};
    zeros.offsets = zero_offsets;
    zeros.count = 2;
    result = write_all(writer, &zeros, NULL, &status);
    CHECK(status == FLOE_STATUS_OK, "zero-length batch status %u", status);
    CHECK(floe_batch_result_failed_count(result) == 2, "zero-length messages failed %zu",
          floe_batch_result_failed_count(result));
    floe_batch_result_free(result);

    /* Misuse. */
    CHECK(floe_writer_write(NULL, &empty, NULL, &result, NULL) == FLOE_STATUS_INVALID_ARGUMENT,
          "NULL writer");
    CHECK(floe_writer_write(writer, NULL, NULL, &result, NULL) == FLOE_STATUS_INVALID_ARGUMENT,
          "NULL batch");
    CHECK(floe_writer_write(writer, &empty, NULL, NULL, NULL) == FLOE_STATUS_INVALID_ARGUMENT,
          "NULL result_out");
    floe_batch no_offsets = {0};
    no_offsets.count = 1;
    write_all(writer, &no_offsets, NULL, &status);
    CHECK(status == FLOE_STATUS_INVALID_ARGUMENT, "count without offsets: %u", status);
    size_t decreasing[] = {0, 5, 2};
    floe_batch bad_offsets = {0};
    bad_offsets.data = (const uint8_t *)"{}{}{}";
    bad_offsets.offsets = decreasing;
    bad_offsets.count = 2;
    write_all(writer, &bad_offsets, NULL, &status);
    CHECK(status == FLOE_STATUS_INVALID_ARGUMENT, "decreasing offsets: %u", status);
    int64_t positions[] = {1};
    size_t one[] = {0, 2};
    floe_batch half_exactly_once = {0};
    half_exactly_once.data = (const uint8_t *)"{}";
    half_exactly_once.offsets = one;
    half_exactly_once.count = 1;
    half_exactly_once.message_offsets = positions;
    write_all(writer, &half_exactly_once, NULL, &status);
    CHECK(status == FLOE_STATUS_INVALID_ARGUMENT, "offsets without sources: %u", status);
    floe_batch_result_free(NULL);
    CHECK(floe_batch_result_rows(NULL) == 0 && floe_batch_result_snapshots(NULL) == 0 &&
              floe_batch_result_failed_count(NULL) == 0 &&
              floe_batch_result_failure(NULL, 0) == NULL,
          "a NULL result reads as empty");
}

/* `min_rows` were reported committed; up to `max_rows` may be, since a call cancelled
 * mid-flight leaves its outcome unknown. */
static void check_stats(floe_writer *writer, uint64_t min_rows, uint64_t max_rows) {
    floe_stats stats;
    memset(&stats, 0xab, sizeof stats);
    floe_error *err = NULL;
    CHECK(floe_writer_stats(writer, &stats, &err) == FLOE_STATUS_OK, "stats: %s", message_of(err));
    floe_error_free(err);
    CHECK(stats.rows >= min_rows && stats.rows <= max_rows, "stats rows %llu, want %llu to %llu",
          (unsigned long long)stats.rows, (unsigned long long)min_rows,
          (unsigned long long)max_rows);
    CHECK(stats.snapshots >= 3 && stats.data_files >= 3 && stats.data_bytes > 0,
          "stats snapshots %llu files %llu", (unsigned long long)stats.snapshots,
          (unsigned long long)stats.data_files);
    CHECK(floe_writer_stats(NULL, &stats, NULL) == FLOE_STATUS_INVALID_ARGUMENT, "NULL writer");
    CHECK(floe_writer_stats(writer, NULL, NULL) == FLOE_STATUS_INVALID_ARGUMENT, "NULL stats_out");
}

/* The events of the writes so far: every committed snapshot once, with its table's name
 * (one pointer per table) and rows summing to `rows`; a second drain is empty. Drained in
 * small pieces to cross the capacity boundary. */
static void check_events(floe_writer *writer, uint64_t rows) {
    floe_event events[3];
    uint64_t committed_rows = 0, commits = 0;
    const char *tables[8] = {0};
    size_t table_count = 0;
    for (;;) {
        size_t n = 99;
        floe_error *err = NULL;
        CHECK(floe_writer_events(writer, events, 3, &n, &err) == FLOE_STATUS_OK, "events: %s",
              message_of(err));
        floe_error_free(err);
        CHECK(n <= 3, "events count %zu", n);
        for (size_t i = 0; i < n && i < 3; i++) {
            const floe_event *e = &events[i];
            CHECK(e->table != NULL && strlen(e->table) > 0, "event without a table");
            if (e->kind != FLOE_EVENT_KIND_COMMITTED) continue;
            CHECK(e->failure == FLOE_STATUS_OK && e->data_files >= 1 && e->data_bytes > 0,
                  "committed event: failure %u, %llu files", e->failure,
                  (unsigned long long)e->data_files);
            size_t t = 0;
            while (t < table_count && strcmp(tables[t], e->table) != 0) t++;
            if (t == table_count && table_count < 8) tables[table_count++] = e->table;
            CHECK(t >= table_count || tables[t] == e->table, "%s: one table's events share one name",
                  e->table);
            committed_rows += e->rows;
            commits++;
        }
        if (n < 3) break;
    }
    CHECK(commits >= 3 && committed_rows == rows, "events: %llu commits, %llu rows, want %llu",
          (unsigned long long)commits, (unsigned long long)committed_rows,
          (unsigned long long)rows);
    size_t n = 99;
    CHECK(floe_writer_events(writer, events, 3, &n, NULL) == FLOE_STATUS_OK && n == 0,
          "events taken twice: %zu", n);
    CHECK(floe_writer_events(writer, NULL, 0, &n, NULL) == FLOE_STATUS_OK && n == 0,
          "no room, no events");
    CHECK(floe_writer_events(NULL, events, 3, &n, NULL) == FLOE_STATUS_INVALID_ARGUMENT,
          "NULL writer");
    CHECK(floe_writer_events(writer, NULL, 3, &n, NULL) == FLOE_STATUS_INVALID_ARGUMENT,
          "NULL events_out");
    CHECK(floe_writer_events(writer, events, 3, NULL, NULL) == FLOE_STATUS_INVALID_ARGUMENT,
          "NULL count_out");
}

enum { ROWS_PER_THREAD = 2000 };

struct in_flight {
    floe_writer *writer;
    const floe_cancel_token *cancel;
    int index;
    floe_status status;
    size_t rows;
};

static void *write_in_flight(void *arg) {
    struct in_flight *w = arg;
    enum { ROWS = ROWS_PER_THREAD };
    char **items = malloc(ROWS * sizeof(char *));
    for (int i = 0; i < ROWS; i++) {
        items[i] = malloc(96);
        snprintf(items[i], 96, "{\"id\": %d, \"name\": \"writer %d row %d\"}", w->index * ROWS + i,
                 w->index, i);
    }
    struct packed p = pack((const char *const *)items, ROWS);
    floe_batch batch = {0};
    batch.data = p.data;
    batch.offsets = p.offsets;
    batch.count = ROWS;
    floe_batch_result *result = write_all(w->writer, &batch, w->cancel, &w->status);
    w->rows = floe_batch_result_rows(result);
    floe_batch_result_free(result);
    unpack(p);
    for (int i = 0; i < ROWS; i++) free(items[i]);
    free(items);
    return NULL;
}

/* Writes from several threads at once; half of them share a token fired mid-flight.
 * Adds the rows the calls reported committed to `*rows` and those of cancelled calls
 * (unknown outcome) to `*unknown`. The writer is freed only after every call returned,
 * as the header requires. */
static void check_concurrent_writes_and_cancel(floe_writer *writer, uint64_t *rows,
                                               uint64_t *unknown) {
    enum { THREADS = 6 };
    floe_cancel_token *token = floe_cancel_token_new();
    CHECK(token != NULL, "token");
    pthread_t threads[THREADS];
    struct in_flight work[THREADS];
    for (int i = 0; i < THREADS; i++) {
        work[i] = (struct in_flight){writer, i % 2 ? token : NULL, i, FLOE_STATUS_INTERNAL, 0};
        pthread_create(&threads[i], NULL, write_in_flight, &work[i]);
    }
    struct timespec pause = {0, 2 * 1000 * 1000};
    nanosleep(&pause, NULL);
    floe_cancel_token_cancel(token);
    floe_cancel_token_cancel(token);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        if (work[i].cancel == NULL) {
            CHECK(work[i].status == FLOE_STATUS_OK, "writer %d: %u", i, work[i].status);
        } else {
            CHECK(work[i].status == FLOE_STATUS_OK || work[i].status == FLOE_STATUS_CANCELLED,
                  "cancelled writer %d: %u", i, work[i].status);
        }
        *rows += work[i].rows;
        if (work[i].status == FLOE_STATUS_CANCELLED) *unknown += ROWS_PER_THREAD;
    }
    /* A token fired before the call cancels it before anything is written. */
    const char *row[] = {"{\"id\": -1}"};
    struct packed p = pack(row, 1);
    floe_batch batch = {0};
    batch.data = p.data;
    batch.offsets = p.offsets;
    batch.count = 1;
    floe_status status;
    write_all(writer, &batch, token, &status);
    CHECK(status == FLOE_STATUS_CANCELLED, "write after the token fired: %u", status);
    unpack(p);
    floe_cancel_token_free(token);
    floe_cancel_token_cancel(NULL);
    floe_cancel_token_free(NULL);
}

/* With exactly-once on, a message's source is its position: one that is not UTF-8 fails
 * that message (and only it). */
static void check_exactly_once_sources(const char *warehouse) {
    floe_writer *writer = open_table_writer(warehouse, "exactly_once",
                                            "{\"exactly_once\": {\"writer_id\": \"abi\"}}");
    floe_status status;
    if (writer == NULL) return;
    floe_batch_result *result = write_unreadable_source(writer, &status);
    CHECK(status == FLOE_STATUS_OK, "exactly-once status %u", status);
    CHECK(floe_batch_result_rows(result) == 1 && floe_batch_result_failed_count(result) == 1 &&
              floe_error_status(floe_batch_result_failure(result, 1)) == FLOE_STATUS_DATA,
          "a source that is not UTF-8, exactly-once on: rows %zu, failed %zu",
          floe_batch_result_rows(result), floe_batch_result_failed_count(result));
    floe_batch_result_free(result);
    floe_writer_free(writer);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <empty warehouse folder>\n", argv[0]);
        return 2;
    }
    check_log_callback();
    check_version_config_and_errors();
    check_open_misuse(argv[1]);

    check_exactly_once_sources(argv[1]);
    floe_writer *writer = open_writer(argv[1]);
    if (writer == NULL) return 1;
    check_writes(writer);
    uint64_t rows = 2 + 3 + 2 + 1, unknown = 0;
    check_stats(writer, rows, rows);
    check_events(writer, rows);
    check_concurrent_writes_and_cancel(writer, &rows, &unknown);
    check_stats(writer, rows, rows + unknown);
    floe_writer_free(writer);

    /* A second writer on the same table sees what the first committed and frees cleanly. */
    writer = open_writer(argv[1]);
    floe_writer_free(writer);

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("abi_test: every check passed (%llu rows reported, %llu of cancelled calls, %ld log "
           "lines)\n",
           (unsigned long long)rows, (unsigned long long)unknown, atomic_load(&log_lines));
    return 0;
}
