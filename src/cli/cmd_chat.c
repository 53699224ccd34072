/* cmd_chat.c - `minfer chat`: placeholder until chat templates land (issue 3). */
#include "cli.h"

int cmd_chat(int argc, char **argv) {
    (void)argc;
    (void)argv;
    return cli_error(1, "chat: not implemented yet");
}
