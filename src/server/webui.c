/* webui.c - see webui.h. The assembler copies the file in (.incbin, GNU as and clang's
 * integrated assembler): no generated source, no xxd. The path is relative to the
 * directory make runs in, the repository root; the Makefile makes this object depend
 * on the file. */
#include "server/webui.h"

__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl srv_webui_begin\n.hidden srv_webui_begin\n"
        ".globl srv_webui_end\n.hidden srv_webui_end\n"
        "srv_webui_begin:\n"
        ".incbin \"src/server/webui/index.html\"\n"
        "srv_webui_end:\n"
        ".byte 0\n"
        ".previous\n");

extern const char srv_webui_begin[] __attribute__((visibility("hidden")));
extern const char srv_webui_end[] __attribute__((visibility("hidden")));

const char *srv_webui_html(size_t *len) {
    *len = (size_t)(srv_webui_end - srv_webui_begin);
    return srv_webui_begin;
}
