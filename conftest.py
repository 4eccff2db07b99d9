"""Test environment: production settings, but plain HTTP on localhost.

Set before Django reads its settings (pytest loads this file first).
"""

import os

for name, value in {
    "SECRET_KEY": "test-secret-key-not-for-production-0123456789abcdef",
    "ALLOWED_HOSTS": "testserver,127.0.0.1,localhost",
    "SECURE_SSL_REDIRECT": "0",
    "SESSION_COOKIE_SECURE": "0",
    "CSRF_COOKIE_SECURE": "0",
    "SECURE_HSTS_SECONDS": "0",
    "RQ_PUBLIC_URL": "http://127.0.0.1:8000",
}.items():
    os.environ.setdefault(name, value)
