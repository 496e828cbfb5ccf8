"""What every client shares about TLS: telling a TLS-only port from a dead one, and one-line reasons."""

from __future__ import annotations

import re
import socket
import ssl

from workbench.errors import WorkbenchError

STACK_CA_HINT = "the local stack's is <state_dir>/tls/ca.crt"

def speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    """Whether host:port completes a TLS handshake (certificate not checked): tells a TLS-only server
    that dropped a plain client from a server that is down. Only called on a failed connect."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, context.wrap_socket(raw):
            return True
    except OSError:  # ssl.SSLError included
        return False

def chained(error: WorkbenchError, cause: BaseException | None) -> WorkbenchError:
    """`error` caused by `cause`; None: a permanent error that retry policies must not see as transient."""
    error.__cause__ = cause
    error.__suppress_context__ = True
    return error

def verify_reason(text: str) -> str:
    reason = text.split("certificate verify failed:", 1)[-1].split("(_ssl")[0].strip(" )")
    return reason or "untrusted certificate"

def ssl_reason(text: str) -> str:
    found = re.search(r"\[SSL: ([A-Z_]+)\]|(wrong version number|record layer failure|unexpected eof)", text,
                      re.IGNORECASE)
    return (found.group(1) or found.group(2)) if found else text.splitlines()[0][:120]
