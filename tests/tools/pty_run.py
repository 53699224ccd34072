"""pty_run.py - runs a command on a pseudo-terminal (its stdin, stdout and stderr are
the terminal, as at a shell), types the given input a line at a time, and prints what
the terminal showed. For the tests of what minfer does at a terminal (chat's line
editing, -q).
    python3 tests/tools/pty_run.py [--delay S] [--timeout S] INPUT -- COMMAND ARGS...
INPUT is typed as given, after escapes (\\n, \\x1b) are decoded, a piece at a time: a
line, or text ending in a Ctrl-C (\\x03, on its own so the signal finds the program
waiting), each --delay seconds after the one before. Exits with the command's status."""
import os
import pty
import re
import select
import sys
import time


def main():
    args = sys.argv[1:]
    delay, timeout = 0.5, 60.0
    while args and args[0].startswith("--") and args[0] != "--":
        if args[0] == "--delay":
            delay = float(args[1])
        elif args[0] == "--timeout":
            timeout = float(args[1])
        args = args[2:]
    text = args[0].encode().decode("unicode_escape").encode("latin-1")
    cmd = args[2:] if args[1] == "--" else args[1:]
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(cmd[0], cmd)
    chunks = re.findall(rb"[^\n\x03]*[\n\x03]|[^\n\x03]+$", text)
    out = b""
    deadline = time.time() + timeout
    next_send = time.time() + delay
    while time.time() < deadline:
        if chunks and time.time() >= next_send:
            os.write(fd, chunks.pop(0))
            next_send = time.time() + delay
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                b = os.read(fd, 4096)
            except OSError:
                break
            if not b:
                break
            out += b
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(out.decode("utf-8", "replace"))
    sys.exit(os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8)


main()
