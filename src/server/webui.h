/* webui.h - the chat page minfer serve answers at / (src/server/webui/index.html, one
 * file of HTML, CSS and JavaScript), compiled into the binary so that the page needs
 * nothing from outside the machine. */
#ifndef MINFER_SERVER_WEBUI_H
#define MINFER_SERVER_WEBUI_H

#include <stddef.h>

/* The page's bytes (not NUL-terminated) and their count. */
const char *srv_webui_html(size_t *len);

#endif
