/*
 * lecture_00: how executable lectures work.
 *
 * The first lecture, and the smoke test of the runtime: it uses every kind
 * of step once, so a change that breaks one shows up here. Run it with
 *
 *     make run LECTURE=lecture_00
 *
 * and open viewer/index.html?trace=lecture_00.
 */
#include "lectern.h"

static void what_a_step_is(void);
static void how_the_stack_is_recorded(void);
static int countdown(int n);
static void kinds_of_steps(void);
static void running_and_viewing(void);

static void lecture_00(void) {
    note("# How executable lectures work");
    note("This lecture is a C program. Running it *is* giving the lecture: "
         "each `note()` it calls becomes one step of a trace, and the viewer "
         "replays the steps beside this very source file.");

    what_a_step_is();
    how_the_stack_is_recorded();
    kinds_of_steps();
    running_and_viewing();

    note("That is all there is to it. The next lectures use the same few calls "
         "to teach with code that really runs.");
}

static void what_a_step_is(void) {
    note("## What a step is");
    note("A step records three things: *what* to show (markdown, text, an image, "
         "a link, a plot), *where* the program was (file, line and function of "
         "every lecture frame on the call stack) and, in a spawned process, "
         "*which rank* said it.");
    int answer = 6 * 7;
    note("Steps are made while the program runs, so they can show real values: "
         "six times seven is **%d**, computed on the line above.",
         answer);
    note("A note in a loop makes one step per pass, each with that pass's values:");
    for (int k = 1; k <= 3; k++)
        note_verbatim("pass %d of 3: k squared is %d", k, k * k);
}

static void how_the_stack_is_recorded(void) {
    note("## How the stack is recorded");
    note("No macro wraps these calls. At each step the runtime walks the machine "
         "stack and reads the program's debug information (DWARF, through "
         "elfutils' libdw) to turn return addresses into file, line and function.");
    note("Only the lecture's own frames are kept. The viewer shows them as a call "
         "stack: this step is two frames deep, `lecture_00` then "
         "`how_the_stack_is_recorded`.");
    note("Recursion works too: each call below is its own frame.");
    countdown(3);
}

/* Each level notes its depth; the trace shows 3, 2, 1 nested ever deeper. */
static int countdown(int n) {
    note_verbatim("countdown(%d): %d frame(s) below lecture_00", n, 5 - n);
    if (n <= 1) return 1;
    return n * countdown(n - 1);
}

static void kinds_of_steps(void) {
    note("## Kinds of steps");
    note("`note()` takes printf-style markdown: *emphasis*, `code`, lists and tables.");
    note("| call | shows |\n|---|---|\n| `note` | markdown |\n| `note_verbatim` | text as is |\n"
         "| `image` | a picture from assets/ |\n| `see` | a reference link |\n"
         "| `plot` | a Vega-Lite chart |\n| `note_system` | a command's output |");
    note_verbatim("note_verbatim keeps   spacing\nand line breaks:\n  x = [0, 1, 2, 3]");
    image("assets/lecture_00_step.svg", 0.5);
    note("Images come from `assets/`, so a trace works offline. A picture on the web "
         "is kept as a link, never downloaded:");
    see("https://en.wikipedia.org/wiki/Literate_programming");
    note("A chart is a Vega-Lite specification; the viewer draws it:");
    plot("{\"$schema\": \"https://vega.github.io/schema/vega-lite/v6.json\","
         " \"description\": \"the squares\","
         " \"data\": {\"values\": [{\"n\": 1, \"square\": 1}, {\"n\": 2, \"square\": 4},"
         " {\"n\": 3, \"square\": 9}, {\"n\": 4, \"square\": 16}]},"
         " \"mark\": \"line\", \"encoding\": {\"x\": {\"field\": \"n\", \"type\": \"quantitative\"},"
         " \"y\": {\"field\": \"square\", \"type\": \"quantitative\"}}}");
    note("`note_system()` records what a command prints, here the machine we run on:");
    note_system("uname -srm");
}

static void running_and_viewing(void) {
    note("## Running and viewing");
    note("`make run LECTURE=lecture_00` builds this file and writes "
         "`traces/lecture_00.json`, plus `traces/lecture_00.js` for the viewer.");
    note("Open `viewer/index.html?trace=lecture_00` in a browser, straight from "
         "disk. Arrow keys step; `?` lists the keys.");
    note("To write a lecture, copy this file to `lectures/NAME.c` and edit it: "
         "`make run LECTURE=NAME` picks it up. If it crashes, the trace up to "
         "the crash is still written, ending with a step that names the line.");
}

int main(int argc, char **argv) { return lecture_main(argc, argv, lecture_00); }
