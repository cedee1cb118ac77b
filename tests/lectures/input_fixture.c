/* Fixture: bad and unusual input from a lecture (tests/test_foundation.py).
 * LECTERN_FIXTURE_INPUT picks the case. */
#include <stdlib.h>
#include <string.h>

#include "lectern.h"

static void big_note(void) {
    size_t n = 10u << 20; /* a 10 MB note */
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        s[i] = (char)('a' + i % 26);
    s[n] = '\0';
    note_verbatim("%s", s);
    free(s);
}

static void body(void) {
    const char *c = getenv("LECTERN_FIXTURE_INPUT");
    c = c ? c : "";
    note("case %s", c);
    if (strcmp(c, "missing_image") == 0) image("assets/no_such_image.png", 0.5);
    if (strcmp(c, "bad_width") == 0) image("assets/lecture_00_step.svg", 1.5);
    if (strcmp(c, "outside_assets") == 0) image("/etc/passwd", 0.5);
    if (strcmp(c, "climbs_out") == 0) image("assets/../README.md", 0.5);
    if (strcmp(c, "empty_strings") == 0) {
        image("", 0.5);
        see("");
        note_system("");
    }
    if (strcmp(c, "remote_image") == 0) image("https://example.org/figure.png", 0.3);
    if (strcmp(c, "bad_plot") == 0) plot("{\"mark\": \"line\", ");
    if (strcmp(c, "missing_command") == 0) note_system("no-such-command-lectern-test --flag");
    if (strcmp(c, "ansi") == 0) note_system("printf '\\033[1;31mred\\033[0m plain\\n'");
    if (strcmp(c, "utf8") == 0) note("bad bytes: \xff\xfe and good: caf\xc3\xa9, cut: \xe2\x82");
    if (strcmp(c, "big") == 0) big_note();
    if (strcmp(c, "status") == 0) {
        int code = note_system("exit 3");
        note_verbatim("exit 3 returned %d", code);
        code = note_system("true");
        note_verbatim("true returned %d", code);
        code = note_system("kill -TERM $$");
        note_verbatim("a killed shell returned %d", code);
    }
    note("after");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, body); }
