"""The TLS context that every HTTP client of the SDK shares.

httpx builds a new one (loading the whole CA bundle) for each client it makes, 27 ms of CPU on the
machine we measure on; an agent makes a client for each invocation it handles. Built once, a client
costs under 1 ms. The context is httpx's own default (certifi, or SSL_CERT_FILE / SSL_CERT_DIR when
set), so what is trusted does not change; an SSLContext may be shared by threads.
"""

import functools
import ssl

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()
