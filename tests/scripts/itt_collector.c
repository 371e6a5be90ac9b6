/* A minimal ITT collector (the library VTune loads through INTEL_LIBITTNOTIFY64): it writes every
 * task (range) begin and end it receives, one line each, to the file named by ITT_TEST_OUT. With
 * INTEL_ITTNOTIFY_GROUPS=all, torch's static ITT part resolves these functions by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ___itt_domain {
    volatile int flags; const char* nameA; void* nameW; int extra1; void* extra2; struct ___itt_domain* next;
} __itt_domain;
typedef struct ___itt_string_handle {
    const char* strA; void* strW; int extra1; void* extra2; struct ___itt_string_handle* next;
} __itt_string_handle;
typedef struct ___itt_id { unsigned long long d1, d2, d3; } __itt_id;

static FILE* out;

static void emit(const char* what, const char* name) {
    if (!out) {
        const char* path = getenv("ITT_TEST_OUT");
        out = fopen(path ? path : "itt.txt", "w");
        if (!out) return;
        setvbuf(out, NULL, _IOLBF, 0);
    }
    fprintf(out, "%s %s\n", what, name ? name : "");
}

const char* __itt_api_version(void) { return "torchneck-test"; }

__itt_domain* __itt_domain_create(const char* name) {
    __itt_domain* d = calloc(1, sizeof *d);
    d->flags = 1;
    d->nameA = strdup(name);
    return d;
}

__itt_string_handle* __itt_string_handle_create(const char* name) {
    __itt_string_handle* h = calloc(1, sizeof *h);
    h->strA = strdup(name);
    return h;
}

void __itt_task_begin(const __itt_domain* d, __itt_id id, __itt_id parent, __itt_string_handle* name) {
    (void)d; (void)id; (void)parent;
    emit("begin", name ? name->strA : NULL);
}

void __itt_task_end(const __itt_domain* d) { (void)d; emit("end", NULL); }
