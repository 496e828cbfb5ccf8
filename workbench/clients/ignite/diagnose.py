"""Why an Ignite connect failed, in one line, and whether retrying can help.

pyignite reports every failed handshake as "Can not connect."; the handshake's error (and, where it cannot
tell, a probe of the port) names the real cause: login, TLS mismatch, untrusted or missing client certificate,
refused, timeout. Login and TLS causes are permanent (only a settings change fixes them).
"""

from __future__ import annotations

import re
import ssl

from workbench.clients.tls import client_context, speaks_tls

# TLS alerts of a node that wants a client certificate and got none, or does not trust the one it got.
_NO_CERTIFICATE = re.compile(r"certificate[ _]required", re.IGNORECASE)
_BAD_CERTIFICATE = re.compile(r"bad[ _]certificate|unknown[ _]ca|certificate[ _]unknown|unsupported[ _]certificate",
                              re.IGNORECASE)
_KEY_FILE_PROBLEM = re.compile(r"PEM lib|bad decrypt|BAD_DECRYPT|KEY_VALUES_MISMATCH|key values mismatch")
CERTIFICATE_HINT = ("pass certfile and keyfile (IgniteDataset's and the ignite loader's parameters; cert_password for "
                    "an encrypted key), or set WORKBENCH_IGNITE_CLIENT_AUTH=1 so the workbench presents the stack's "
                    "<tls_dir>/client.crt")


def _ignite_connect_error(where: str, options: dict[str, object], failure: str) -> tuple[str, bool]:
    """(one line saying why connecting to Ignite failed and what to do, whether retrying is pointless).

    `failure` is the repr of the handshake's error, e.g. "SSLCertVerificationError(1, '[SSL: ...] ...')".
    A TLS mismatch is reported only when the port itself confirms it (a plain port never completes a TLS
    handshake; a network fault, e.g. a toxiproxy reset, cannot make one complete): anything else stays a
    transient failure that retry policies may retry.
    """
    kind = failure.split("(", 1)[0]
    reason = failure[len(kind) + 1:-1].strip() if failure.endswith(")") else failure
    reason = (re.sub(r"^\d+, ", "", reason).strip("'\"") or kind)[:200]
    tls = bool(options.get("use_ssl"))
    closed = kind in ("OSError", "SocketError", "ConnectionResetError", "EOFError", "BrokenPipeError")
    if kind == "AuthenticationError":
        user = options.get("username")
        if not user:
            return (f"Ignite at {where} requires a login ({reason}): set WORKBENCH_IGNITE_USERNAME and "
                    "WORKBENCH_IGNITE_PASSWORD (`workbench init` generates them)"), True
        return (f"Ignite at {where} refused the login of user '{user}' ({reason}): wrong user name or password; "
                "check WORKBENCH_IGNITE_USERNAME / WORKBENCH_IGNITE_PASSWORD (or the loader's username/password)"), True
    certfile = options.get("ssl_certfile")
    if certfile is not None and _KEY_FILE_PROBLEM.search(reason):
        return (f"cannot use the client certificate {certfile} / key {options.get('ssl_keyfile') or certfile} "
                f"for Ignite at {where} ({reason}): wrong cert_password for an encrypted key, or a key that "
                "does not match the certificate"), True
    alert = bool(_NO_CERTIFICATE.search(reason) or _BAD_CERTIFICATE.search(reason))  # the server spoke TLS
    if tls and alert:
        return _certificate_refused(where, certfile, reason), True
    if kind == "SSLCertVerificationError":
        return (f"cannot verify the TLS certificate of Ignite at {where} ({reason}) with CA file "
                f"{options.get('ssl_ca_certfile')}: set WORKBENCH_TLS_CA_FILE to the CA that signed it"), True
    host, port = where.split(", ")[0].rsplit(":", 1)  # the first node
    timeout_s = float(str(options.get("handshake_timeout") or 5))
    if tls and kind.startswith("SSL") and not speaks_tls(host, int(port), min(timeout_s, 5.0)):
        return (f"TLS handshake with Ignite at {where} failed ({reason}): the server does not speak TLS on that "
                "port; set WORKBENCH_TLS to match the server (or enable SSL on its client connector)"), True
    if closed and not tls and speaks_tls(host, int(port), min(timeout_s, 5.0)):
        return (f"Ignite at {where} closed the connection during the handshake ({reason}): the port speaks TLS; "
                "set WORKBENCH_TLS=1 (and WORKBENCH_TLS_CA_FILE to its CA)"), True
    # A node with sslClientAuth closes the connection without a TLS alert: only a probe tells why.
    if tls and (kind.startswith("SSL") or closed) and wants_client_certificate(host, int(port), min(timeout_s, 3.0)):
        return _certificate_refused(where, certfile, reason), True
    if kind == "ConnectionRefusedError":
        return (f"cannot reach Ignite at {where}: connection refused; is the stack up? (`workbench stack status`)",
                False)
    if kind in ("TimeoutError", "timeout"):
        return (f"cannot reach Ignite at {where}: no answer within {options.get('handshake_timeout')} s; "
                "is the stack up? (`workbench stack status`)"), False
    return (f"cannot reach Ignite at {where}: {kind}: {reason}; is the stack up? (`workbench stack status`)",
            False)


def _certificate_refused(where: str, certfile: object, reason: str) -> str:
    if certfile is None:
        return f"Ignite at {where} requires a client certificate ({reason}): {CERTIFICATE_HINT}"
    return (f"Ignite at {where} refused the client certificate {certfile} ({reason}): give one signed by a CA in "
            "the node's trust store (sslContextFactory trustStore)")


def wants_client_certificate(host: str, port: int, timeout_s: float) -> bool:
    """Whether the TLS server at host:port refuses a connection that presents no client certificate.

    A server that requires one refuses the handshake (TLS 1.2 asks during it) or, with TLS 1.3, closes the
    connection right after it (Ignite sends no alert: the client sees only an EOF); any other server waits
    for the client to speak. The server's certificate is not checked here: this only explains a failure.
    """
    import socket

    context = client_context(verify=False)
    try:
        with socket.create_connection((host, port), timeout_s) as raw, \
                context.wrap_socket(raw, suppress_ragged_eofs=False) as conn:
            conn.settimeout(timeout_s)
            try:
                return conn.recv(1) == b""
            except TimeoutError:
                return False
            except (ssl.SSLError, ConnectionError):
                return True
    except ssl.SSLError:
        return True
    except OSError:
        return False
