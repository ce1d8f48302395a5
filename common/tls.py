"""What every party says when a TLS connection fails on the server's certificate: one line,
and no retry (a retry cannot change a certificate). Standard library only."""

from __future__ import annotations

import ssl

__all__ = ["certificate_refused", "UNTRUSTED"]

UNTRUSTED = ("TLS: the server's certificate is not trusted (not signed by the CA given with "
             "--ca-file, or not for this host)")


def certificate_refused(exc: BaseException) -> bool:
    """True when a connection failed on the server's certificate (httpx wraps ssl's error
    in its own).

    >>> certificate_refused(OSError("connection refused"))
    False
    >>> certificate_refused(ssl.SSLCertVerificationError("certificate verify failed"))
    True
    """
    seen: BaseException | None = exc
    for _ in range(5):  # bounded: a short chain of causes
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError) \
                or "CERTIFICATE_VERIFY_FAILED" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
