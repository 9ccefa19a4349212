"""Text from elsewhere made safe to show on a terminal: in one place.

A terminal obeys control characters in what it is given: ESC opens sequences that
set the window title (OSC 0), write the clipboard (OSC 52), make hidden hyperlinks
(OSC 8) or move the cursor to repaint earlier lines. What the cluster says
(condition and event messages, termination messages, reasons, node names, label
values, the API server's error text) is shown, never obeyed, as kubectl does since
CVE-2021-25743. `escape` writes each such character visibly, in the notation
``cat -v`` uses:

- C0 controls and DEL in caret notation: ESC is ``^[`` (as kubectl writes it), a
  newline ``^J``, a tab ``^I``, BEL ``^G``, DEL ``^?``; even a newline, so that a
  field never breaks the one line it is shown in;
- C1 controls (U+0080-U+009F, CSI U+009B among them) with ``M-`` before the caret
  form: U+009B is ``M-^[``;
- characters that reorder or break a line without being control characters
  (bidirectional overrides and isolates, U+2028/U+2029) and lone surrogates (which
  no terminal encoding can write) as ``<U+202E>``.

The result holds none of these characters, so escaping twice changes nothing:
a text may pass through `escape` at the boundary and again where it is printed.
The notation cannot be undone (a literal ``^[`` reads the same); it is for eyes.

Pod logs are the user's own program's output and keep their colours; see
`escape_log`. Standard library only (``kdist.shared``).
"""

from __future__ import annotations

import re
from typing import IO

#: Bidirectional formatting characters: what follows them can read in another order
#: (the "Trojan Source" trick), and line/paragraph separators, which Python's
#: str.splitlines() splits on.
_REORDERING = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
               0x2028, 0x2029]


def _table() -> dict[int, str]:
    table = {c: "^" + chr(c + 0x40) for c in range(0x20)}
    table[0x7F] = "^?"
    table.update({c: "M-^" + chr(c - 0x80 + 0x40) for c in range(0x80, 0xA0)})
    table.update({c: f"<U+{c:04X}>" for c in (*_REORDERING, *range(0xD800, 0xE000))})
    return table


_TABLE = _table()
_LOG_TABLE = {**_TABLE, 0x09: "\t"}  # a log's tabs only move the cursor right
# Select Graphic Rendition (colours, bold): ESC [ params m. Nothing else is kept.
_SGR = re.compile(r"\x1b\[[0-9;:]{0,64}m")


def escape(text: object) -> str:
    """`text` (str() of anything else) with every control character shown, not obeyed."""
    return (text if isinstance(text, str) else str(text)).translate(_TABLE)


def escape_lines(text: str) -> str:
    """Each line of `text` escaped; the newlines between them kept (a message that is
    several lines by design, such as every problem of a spec)."""
    return "\n".join(escape(line) for line in text.split("\n"))


def escape_log(line: str) -> str:
    """One line of a pod's log as a terminal should get it: colours kept, nothing else.

    A user's training log may be coloured (a coloured logger, rich), so SGR
    sequences (``ESC [ ... m``) pass, as do tabs; every other control
    character is escaped as `escape` does, so a sample of generated or scraped
    text that the program prints cannot retitle the window, write the clipboard
    or repaint the screen (a carriage return is ``^M``: it would overwrite the
    ``[rank N]`` prefix; kdist's launcher has already made a progress bar's
    redraws one line, and a CRLF line end is dropped). Only for a terminal: a
    pipe or a file gets the line as the pod wrote it (`log_for`), as ``kubectl
    logs`` passes it.
    """
    line = line.removesuffix("\r")
    out, at = [], 0
    for m in _SGR.finditer(line):
        out += [line[at:m.start()].translate(_LOG_TABLE), m.group()]
        at = m.end()
    out.append(line[at:].translate(_LOG_TABLE))
    return "".join(out)


def log_for(stream: IO[str], line: str) -> str:
    """A line of a pod's log as `stream` gets it: `escape_log` on a terminal, else as
    the pod wrote it."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        tty = False
    return escape_log(line) if tty else line
