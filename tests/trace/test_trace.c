/*
 * test_trace.c: unit tests of the trace runtime (cmocka).
 *
 * UTF-8 repair, markdown to HTML, stack capture from plain C code, the step
 * sink, the atomic writer (a failed run keeps the last good trace), and the
 * trace's listeners.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trace/trace.h"

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    return s;
}

static void utf8_repair_keeps_valid_and_replaces_invalid(void **state) {
    (void)state;
    char *a = lx_utf8_repair("plain ascii");
    assert_string_equal(a, "plain ascii");
    char *b = lx_utf8_repair("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    assert_string_equal(b, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    /* A lone continuation byte, an overlong "/", a surrogate, a cut sequence. */
    char *c = lx_utf8_repair("x\x80y\xc0\xafz\xed\xa0\x80w\xe2\x82");
    assert_string_equal(c, "x\xef\xbf\xbdy\xef\xbf\xbd\xef\xbf\xbdz\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdw"
                           "\xef\xbf\xbd\xef\xbf\xbd");
    free(a);
    free(b);
    free(c);
}

static void markdown_renders_and_escapes_html(void **state) {
    (void)state;
    char *h = lx_markdown_to_html("## Title\n\n*a* `b < c`");
    assert_string_equal(h, "<h2>Title</h2>\n<p><em>a</em> <code>b &lt; c</code></p>\n");
    free(h);
    /* Raw HTML in a note stays text. */
    h = lx_markdown_to_html("<script>x</script>");
    assert_null(strstr(h, "<script>"));
    free(h);
    h = lx_markdown_to_html("| a | b |\n|---|---|\n| 1 | 2 |");
    assert_non_null(strstr(h, "<table>"));
    free(h);
}

/* Stack capture from ordinary code: the test program is not under runtime/,
 * so its frames count as lecture frames. */
static int captured_line;
static int captured_n;
static lx_frame captured[LX_MAX_FRAMES];

static void inner_capture(void) {
    captured_line = __LINE__ + 1;
    captured_n = lx_stack_capture(captured, LX_MAX_FRAMES);
}

static int outer_line;
static void outer_capture(void) {
    outer_line = __LINE__ + 1;
    inner_capture();
}

static void stack_capture_names_functions_and_lines(void **state) {
    (void)state;
    lx_stack_set_root((const void *)outer_capture);
    outer_capture();
    lx_stack_set_root(NULL);
    assert_int_equal(captured_n, 2); /* the root is the outermost frame kept */
    assert_string_equal(captured[0].function, "outer_capture");
    assert_int_equal(captured[0].line, outer_line);
    assert_string_equal(captured[1].function, "inner_capture");
    assert_int_equal(captured[1].line, captured_line);
    assert_string_equal(captured[1].path, "tests/trace/test_trace.c");
    assert_string_equal(lx_function_path((const void *)outer_capture), "tests/trace/test_trace.c");
}

/* The frame-pointer walk and backtrace() name the same frames: from plain
 * nested calls, and from a callback that libc's qsort() makes (libc is
 * built without frame pointers, so the chain may break there; the capture
 * then falls back to backtrace() and still gives the same frames). */
static lx_frame by_chain[LX_MAX_FRAMES], by_unwinder[LX_MAX_FRAMES], by_default[LX_MAX_FRAMES];
static int n_chain, n_unwinder, n_default;

static void capture_three_ways(void) {
    n_chain = lx_stack_capture_by(LX_WALK_FRAME_POINTERS, by_chain, LX_MAX_FRAMES);
    n_unwinder = lx_stack_capture_by(LX_WALK_BACKTRACE, by_unwinder, LX_MAX_FRAMES);
    n_default = lx_stack_capture(by_default, LX_MAX_FRAMES);
}

static int compare_and_capture(const void *a, const void *b) {
    capture_three_ways();
    return *(const int *)a - *(const int *)b;
}

static void level_3(void) { capture_three_ways(); }
static void level_2(void) { level_3(); }
static void level_1(void) { level_2(); }

static void through_qsort(void) {
    int v[2] = {2, 1};
    qsort(v, 2, sizeof v[0], compare_and_capture);
}

/* The innermost frame is capture_three_ways, on the line of each capture:
 * three lines, one apart. */
static void assert_same_frames(const lx_frame *a, const lx_frame *b, int n) {
    for (int i = 0; i < n; i++) {
        assert_string_equal(a[i].function, b[i].function);
        assert_string_equal(a[i].path, b[i].path);
        if (i < n - 1) assert_int_equal(a[i].line, b[i].line);
        else assert_true(abs(a[i].line - b[i].line) <= 2);
    }
}

static void frame_pointer_walk_agrees_with_backtrace(void **state) {
    (void)state;
    lx_stack_set_root((const void *)level_1);
    level_1();
    lx_stack_set_root(NULL);
    assert_int_equal(n_unwinder, 4);       /* level_1, level_2, level_3, capture_three_ways */
    assert_int_equal(n_chain, n_unwinder); /* our code has frame pointers: the chain reaches the root */
    assert_same_frames(by_chain, by_unwinder, n_unwinder);
    assert_int_equal(n_default, n_unwinder);
    assert_same_frames(by_default, by_unwinder, n_unwinder);

    lx_stack_set_root((const void *)through_qsort);
    through_qsort();
    lx_stack_set_root(NULL);
    assert_int_equal(n_unwinder, 3); /* through_qsort, compare_and_capture, capture_three_ways */
    assert_string_equal(by_unwinder[1].function, "compare_and_capture");
    assert_int_equal(n_default, n_unwinder);
    assert_same_frames(by_default, by_unwinder, n_unwinder);
    /* The chain alone either reached the root with the same frames or said
     * it could not (-1): never other frames. */
    if (n_chain >= 0) {
        assert_int_equal(n_chain, n_unwinder);
        assert_same_frames(by_chain, by_unwinder, n_unwinder);
    }
}

static void lecture_paths(void **state) {
    (void)state;
    assert_true(lx_is_lecture_path("lectures/lecture_08.c"));
    assert_true(lx_is_lecture_path("lectures/mlp.h"));
    assert_false(lx_is_lecture_path("runtime/trace/trace.c"));
    assert_false(lx_is_lecture_path("/usr/include/stdio.h"));
    assert_false(lx_is_lecture_path(NULL));
}

static cJSON *sunk;
static void test_sink(cJSON *step) {
    cJSON_Delete(sunk);
    sunk = step;
}

static void steps_go_to_the_sink(void **state) {
    (void)state;
    lx_trace_init("unit", "/tmp");
    lx_set_step_sink(test_sink);
    lx_set_in_rank(2, 4);
    note("hello %d", 42);
    lx_set_step_sink(NULL);
    assert_non_null(sunk);
    cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(sunk, "renderings"), 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(r, "data")), "hello 42");
    assert_int_equal(cJSON_GetObjectItem(sunk, "rank")->valueint, 2);
    assert_int_equal(cJSON_GetObjectItem(sunk, "world_size")->valueint, 4);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(sunk, "spawn")));
    assert_int_equal(lx_trace_step_count(), 0); /* the sink took it, not the trace */
    cJSON_Delete(sunk);
    sunk = NULL;
    lx_trace_free();
}

/* see(url) and see(url, title): one link rendering each, the title only when
 * given, and the step stamped with the line of the see() call. */
static cJSON *sunk_link(const char *key) {
    cJSON *r = cJSON_GetArrayItem(cJSON_GetObjectItem(sunk, "renderings"), 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(r, "type")), "link");
    return cJSON_GetObjectItem(r, key);
}

static int sunk_line(void) {
    cJSON *stack = cJSON_GetObjectItem(sunk, "stack");
    cJSON *inner = cJSON_GetArrayItem(stack, cJSON_GetArraySize(stack) - 1);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(inner, "function")), "see_with_and_without_title");
    return cJSON_GetObjectItem(inner, "line")->valueint;
}

static void see_with_and_without_title(void **state) {
    (void)state;
    lx_trace_init("unit", "/tmp");
    lx_set_step_sink(test_sink);
    int line = __LINE__ + 1;
    see("https://example.org/a");
    assert_string_equal(cJSON_GetStringValue(sunk_link("url")), "https://example.org/a");
    assert_null(sunk_link("title"));
    assert_int_equal(sunk_line(), line);
    line = __LINE__ + 1;
    see("https://example.org/b", "The B paper");
    assert_string_equal(cJSON_GetStringValue(sunk_link("url")), "https://example.org/b");
    assert_string_equal(cJSON_GetStringValue(sunk_link("title")), "The B paper");
    assert_int_equal(sunk_line(), line);
    see("https://example.org/c", ""); /* an empty title is no title */
    assert_null(sunk_link("title"));
    lx_set_step_sink(NULL);
    cJSON_Delete(sunk);
    sunk = NULL;
    lx_trace_free();
}

static void write_is_atomic_and_failure_keeps_good_trace(void **state) {
    (void)state;
    char dir[] = "/tmp/lectern-unit-XXXXXX";
    assert_non_null(mkdtemp(dir));

    lx_trace_init("unit", dir);
    note("first");
    assert_int_equal(lx_trace_write(), 0);
    char *good_path = lx_fmt("%s/unit.json", dir);
    char *good = read_all(good_path);
    assert_non_null(good);
    assert_non_null(strstr(good, "\"first\""));
    char *js_path = lx_fmt("%s/unit.js", dir);
    char *js = read_all(js_path);
    assert_non_null(js);
    assert_int_equal(strncmp(js, "(window.lecternTraces = window.lecternTraces || {})[\"unit\"] = {", 63), 0);
    lx_trace_free();

    /* A second run that fails: the good trace stays byte for byte. */
    lx_trace_init("unit", dir);
    note("second");
    lx_mark_failed();
    assert_int_equal(lx_trace_write(), 0);
    char *again = read_all(good_path);
    assert_string_equal(again, good);
    char *failed_path = lx_fmt("%s/unit.failed.json", dir);
    char *failed = read_all(failed_path);
    assert_non_null(failed);
    assert_non_null(strstr(failed, "\"second\""));
    assert_non_null(strstr(failed, "\"status\":\"failed\""));
    lx_trace_free();

    /* No temporary file is left behind. */
    char *cmd = lx_fmt("ls %s | grep -c tmp", dir);
    FILE *p = popen(cmd, "r");
    int count = -1;
    assert_int_equal(fscanf(p, "%d", &count), 1);
    pclose(p);
    assert_int_equal(count, 0);

    char *rm = lx_fmt("rm -rf %s", dir);
    assert_int_equal(system(rm), 0);
    free(cmd);
    free(rm);
    free(good_path);
    free(good);
    free(js_path);
    free(js);
    free(again);
    free(failed_path);
    free(failed);
}

static void unwritable_folder_is_an_error(void **state) {
    (void)state;
    lx_trace_init("unit", "/proc/version/not-a-dir");
    note("x");
    assert_int_equal(lx_trace_write(), -1);
    lx_trace_free();
}

/* trace.c's listeners (check.c's and grade.c's, registered by lecture_main):
 * each hears every step, appended or only tallied, once however often it
 * was registered, in the order registered; the trace being written asks
 * them for meta, then says it was written. Registered for good, so this
 * test runs last. */
static char heard_log[64];
static int written_count;
static void hear(char c) {
    size_t n = strlen(heard_log);
    if (n + 1 < sizeof heard_log) heard_log[n] = c;
}
static void hear_a(const cJSON *step) { hear(step ? 'a' : '?'); }
static void hear_b(const cJSON *step) { hear(step ? 'b' : '?'); }
static void heard_meta(cJSON *meta) { lx_json_set(meta, "heard", cJSON_CreateString(heard_log)); }
static void heard_written(void) { written_count++; }

static void listeners_hear_each_step_once_in_order(void **state) {
    (void)state;
    char dir[] = "/tmp/lectern-unit-XXXXXX";
    assert_non_null(mkdtemp(dir));
    lx_trace_init("unit", dir);
    const lx_trace_listener a = {.step = hear_a, .meta = heard_meta, .written = heard_written};
    lx_trace_listen(&a);
    lx_trace_listen(&(lx_trace_listener){.step = hear_b});
    lx_trace_listen(&a); /* again: nothing changes */
    note("appended");
    cJSON *folded = cJSON_CreateObject(); /* a step only tallied, as a rank's folded check */
    lx_trace_tally(folded);
    cJSON_Delete(folded);
    assert_string_equal(heard_log, "abab");
    assert_int_equal(lx_trace_step_count(), 1);
    assert_int_equal(lx_trace_write(), 0);
    assert_int_equal(written_count, 1);
    char *path = lx_fmt("%s/unit.json", dir);
    char *json = read_all(path);
    assert_non_null(json);
    assert_non_null(strstr(json, "\"heard\":\"abab\""));
    lx_trace_free();
    char *rm = lx_fmt("rm -rf %s", dir);
    assert_int_equal(system(rm), 0);
    free(rm);
    free(json);
    free(path);
}

/* lx_note_args: the names come from the macro's text of the arguments; without
 * that text (NULL, or a text that does not hold one name per conversion)
 * there are no names rather than wrong ones. */
static cJSON *args_of(const char *text, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cJSON *a = lx_note_args(text, fmt, ap);
    va_end(ap);
    return a;
}

static void note_args_need_their_text(void **state) {
    (void)state;
    assert_null(args_of(NULL, "x %d", 3));
    assert_null(args_of("\"x %d %d\", n", "x %d %d", 3, 4)); /* one name for two conversions */
    assert_null(args_of("\"x %d\", n, m", "x %d", 3));       /* a name no conversion takes */
    assert_null(args_of("\"x %1$d\", n", "x %1$d", 3));      /* positional: not read */
    cJSON *a = args_of("\"x %d\", n", "x %d", 3);
    assert_non_null(a);
    assert_int_equal(cJSON_GetArraySize(a), 1);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "expr")->valuestring, "n");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(a, 0), "printed")->valuestring, "3");
    cJSON_Delete(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
            cmocka_unit_test(utf8_repair_keeps_valid_and_replaces_invalid),
            cmocka_unit_test(markdown_renders_and_escapes_html),
            cmocka_unit_test(stack_capture_names_functions_and_lines),
            cmocka_unit_test(frame_pointer_walk_agrees_with_backtrace),
            cmocka_unit_test(lecture_paths),
            cmocka_unit_test(steps_go_to_the_sink),
            cmocka_unit_test(see_with_and_without_title),
            cmocka_unit_test(write_is_atomic_and_failure_keeps_good_trace),
            cmocka_unit_test(unwritable_folder_is_an_error),
            cmocka_unit_test(listeners_hear_each_step_once_in_order),
            cmocka_unit_test(note_args_need_their_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
