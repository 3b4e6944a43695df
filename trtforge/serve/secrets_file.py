"""The admin token reaches tritonserver through a file only this user can read, never its argv.

tritonserver takes its restricted-API key on the command line (``--http-restricted-api=...,key=value``),
and a command line is world-readable (``ps -ef``, ``/proc/PID/cmdline``). So the command line carries
a placeholder, the token goes into a 0600 file in the server's 0700 work folder, and a tiny
``LD_PRELOAD`` library (compiled here from the C below, with the machine's C compiler) swaps the
placeholder for the file's contents in tritonserver's ``argv`` pointers before ``main`` runs. The
strings the kernel shows stay the placeholder. The library drops ``LD_PRELOAD`` at once, so
Triton's stub processes never load it; it exits with status 2 when the file cannot be read (it
never lets Triton start with the placeholder as the key).

Example:
    >>> hidden = hide_token(work, "s3cret")
    >>> hidden.argument("model-repository:admin-key=")   # what goes on the command line
    'model-repository:admin-key=@TRTFORGE_ADMIN_TOKEN@'
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: The placeholder tritonserver's command line shows instead of the token.
PLACEHOLDER = "@TRTFORGE_ADMIN_TOKEN@"
#: The variable naming the token file, read (and removed) by the preload library.
FILE_VARIABLE = "TRTFORGE_ADMIN_TOKEN_FILE"

SHIM_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char MARK[] = "@TRTFORGE_ADMIN_TOKEN@";

__attribute__((constructor)) static void trtforge_token(int argc, char **argv, char **envp) {
    (void)envp;
    char path[4096] = "";
    const char *named = getenv("TRTFORGE_ADMIN_TOKEN_FILE");
    if (named) strncpy(path, named, sizeof path - 1);
    unsetenv("LD_PRELOAD");
    unsetenv("TRTFORGE_ADMIN_TOKEN_FILE");
    char token[4096];
    size_t n = 0;
    FILE *f = path[0] ? fopen(path, "r") : NULL;
    if (f) { n = fread(token, 1, sizeof token - 1, f); fclose(f); }
    token[n] = 0;
    while (n && (token[n - 1] == '\n' || token[n - 1] == '\r')) token[--n] = 0;
    for (int i = 1; i < argc; i++) {
        char *at = strstr(argv[i], MARK);
        if (!at) continue;
        if (!n) { fprintf(stderr, "trtforge: cannot read the admin token file %s\n", path); _exit(2); }
        size_t head = (size_t)(at - argv[i]), tail = strlen(at + sizeof MARK - 1);
        char *s = malloc(head + n + tail + 1);
        if (!s) _exit(2);
        memcpy(s, argv[i], head);
        memcpy(s + head, token, n);
        memcpy(s + head + n, at + sizeof MARK - 1, tail + 1);
        argv[i] = s;
    }
}
"""


@dataclass(frozen=True)
class HiddenToken:
    """How to hand the token over: the command-line value and the environment for tritonserver."""

    value: str  # the placeholder, or the token itself when no C compiler was found
    environment: dict[str, str]
    file: Path | None

    def argument(self, prefix: str) -> str:
        return prefix + self.value

    def forget(self) -> None:
        """Delete the token file (tritonserver has read it once it runs)."""
        if self.file is not None:
            self.file.unlink(missing_ok=True)


def _compiler() -> str | None:
    return next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)


def hide_token(work: Path, token: str) -> HiddenToken:
    """Write ``token`` to a 0600 file in ``work`` and build the preload library beside it.

    Without a C compiler the token goes on the command line as before, with a warning naming the fix.
    """
    compiler = _compiler()
    if compiler is None:
        log.warning("trtforge serve: no C compiler (cc) found, so the admin token is on tritonserver's command "
                    "line, which other users of this machine can read; install gcc to keep it off")
        return HiddenToken(token, {}, None)
    source, library = work / "trtforge_token.c", work / "libtrtforge_token.so"
    source.write_text(SHIM_C)
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source)], check=True,
                   capture_output=True)
    file = work / "admin-token"
    descriptor = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token)
    return HiddenToken(PLACEHOLDER, {"LD_PRELOAD": str(library), FILE_VARIABLE: str(file)}, file)
