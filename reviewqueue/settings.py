"""Settings for Review Queue, read from the environment only.

Every value has a typed reader that fails loudly on a bad value, so a typo in production stops
the process at start instead of silently running with a default. Defaults are safe for
production; `DEBUG=1` switches on the explicit development ones.
"""

import os
from pathlib import Path
from urllib.parse import quote

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP
from psycopg.conninfo import make_conninfo

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {value!r}")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return [part.strip() for part in value.split(",") if part.strip()]


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY is required unless DEBUG=1")
    SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"
# Run tokens are MACs under a key derived from it (holds/auth.py): as long as Django's own deploy check asks.
if not DEBUG and (len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5):
    raise ImproperlyConfigured(
        f"SECRET_KEY must be at least 50 characters, 5 of them different, unless DEBUG=1;"
        f" it has {len(SECRET_KEY)}, {len(set(SECRET_KEY))} different"
    )

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"] if DEBUG else [])
RQ_PUBLIC_URL = env_str("RQ_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
RQ_MEDIA_ROOT = Path(env_str("RQ_MEDIA_ROOT", str(BASE_DIR / "var" / "media")))
RQ_VAR_DIR = Path(env_str("RQ_VAR_DIR", str(BASE_DIR / "var")))
REDIS_URL = env_str("REDIS_URL")

# Delivery of invocations: the retry schedule (seconds before each try), Standard Webhooks style.
RQ_RETRY_SCHEDULE = [
    int(s) for s in env_list("RQ_RETRY_SCHEDULE", "0,5,30,120,600,1800,3600,7200,21600,43200,86400".split(","))
]
RQ_RELAY_INTERVAL = env_int("RQ_RELAY_INTERVAL", 5)
RQ_SWEEP_INTERVAL = env_int("RQ_SWEEP_INTERVAL", 10)
RQ_SWEEP_BATCH = env_int("RQ_SWEEP_BATCH", 1000)
# Sweeps that work through a backlog side by side (holds.tasks.sweep_expired).
RQ_SWEEPERS = env_int("RQ_SWEEPERS", 2)
RQ_BENCH_VIEWS = env_bool("RQ_BENCH_VIEWS", False)
# A worker's claim on an invocation lasts its timeout plus this; then the relay hands it out again.
RQ_LEASE_GRACE = env_int("RQ_LEASE_GRACE", 30)
# A due row the relay published is not published again for this long: its message is still queued (a
# backlog) or was lost, and only the second is worth another message (holds.tasks.relay_due).
RQ_RELAY_LEASE = env_int("RQ_RELAY_LEASE", 30)
# While an endpoint is stalled (an attempt timed out), deliveries other than the probe wait this long.
RQ_STALLED_WAIT = env_int("RQ_STALLED_WAIT", 30)
# Once a call from one worker process to an endpoint has waited over RQ_SLOW_CALL seconds, that
# process sends at most this many calls to the endpoint at once; its next deliveries wait RQ_BUSY_WAIT
# seconds in the database (holds/delivery.py).
RQ_ENDPOINT_MAX_IN_FLIGHT = env_int("RQ_ENDPOINT_MAX_IN_FLIGHT", 8)
RQ_SLOW_CALL = float(env_str("RQ_SLOW_CALL", "0.5"))
RQ_BUSY_WAIT = env_int("RQ_BUSY_WAIT", 5)
# Until an endpoint has answered a worker process (and again after a call to it timed out), that process
# sends it at most this many calls at once; a further delivery waits for the first answer while the
# oldest call is under RQ_SLOW_CALL, then RQ_BUSY_WAIT in the database (holds/delivery.py).
RQ_UNANSWERED_IN_FLIGHT = env_int("RQ_UNANSWERED_IN_FLIGHT", 2)
# An A2A task that the agent goes on working on waits in the database for the agent's push notification;
# should that push be lost (A2A delivers pushes at best once), a worker asks GetTask after 2, 4, 8… seconds,
# at most this many.
RQ_A2A_POLL = env_int("RQ_A2A_POLL", 300)
RQ_CONFIDENCE_AMBER = 0.8
RQ_CONFIDENCE_RED = 0.5
# /metrics answers only `Authorization: Bearer <RQ_METRICS_TOKEN>`; unset, /metrics is off (404).
RQ_METRICS_TOKEN = env_str("RQ_METRICS_TOKEN", "")
# An agent endpoint is shown as failing after this many failed attempts in a row, or this long failing.
RQ_ENDPOINT_FAILING_AFTER = env_int("RQ_ENDPOINT_FAILING_AFTER", 3)
RQ_ENDPOINT_FAILING_MINUTES = env_int("RQ_ENDPOINT_FAILING_MINUTES", 5)
RQ_HEALTH_TIMEOUT = float(env_int("RQ_HEALTH_TIMEOUT", 2))  # seconds per /healthz check
RQ_ROLLUP_INTERVAL = env_int("RQ_ROLLUP_INTERVAL", 60)  # sealing hours and 5-minute buckets for /ops, /metrics
# Notifications: the sender, the webhook timeout, retries with exponential backoff, reminders.
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Review Queue <review-queue@localhost>")
RQ_NOTIFY_FROM = env_str("RQ_NOTIFY_FROM", DEFAULT_FROM_EMAIL)
RQ_WEBHOOK_TIMEOUT = float(env_int("RQ_WEBHOOK_TIMEOUT", 10))
RQ_NOTIFY_RETRIES = env_int("RQ_NOTIFY_RETRIES", 6)
RQ_NOTIFY_BACKOFF = env_int("RQ_NOTIFY_BACKOFF", 30)
# Slack (docs/channels.md): a bot token with chat:write and users:read.email, and the app's signing
# secret. RQ_SLACK_API_URL only points the client at a stand-in in tests.
RQ_SLACK_BOT_TOKEN = env_str("RQ_SLACK_BOT_TOKEN", "")
RQ_SLACK_SIGNING_SECRET = env_str("RQ_SLACK_SIGNING_SECRET", "")
RQ_SLACK_API_URL = env_str("RQ_SLACK_API_URL", "https://slack.com/api/")
RQ_SLACK_CLOSE_INTERVAL = env_int("RQ_SLACK_CLOSE_INTERVAL", 10)
# Web Push: `manage.py vapid_keys` prints both keys; the subject is a mailto: or https: contact.
RQ_VAPID_PRIVATE_KEY = env_str("RQ_VAPID_PRIVATE_KEY", "")
RQ_VAPID_PUBLIC_KEY = env_str("RQ_VAPID_PUBLIC_KEY", "")
RQ_VAPID_SUBJECT = env_str("RQ_VAPID_SUBJECT", "mailto:ops@example.com")
RQ_REMIND_INTERVAL = env_int("RQ_REMIND_INTERVAL", 60)
# MCP (/mcp, served by the ASGI process; README "MCP"): the capability whose holds request_approval asks,
# how long such a hold waits for a person (seconds), and the waiter's poll behind a transaction pooler.
RQ_MCP_CAPABILITY = env_str("RQ_MCP_CAPABILITY", "mcp")
RQ_MCP_EXPIRES_IN = env_int("RQ_MCP_EXPIRES_IN", 3600)
RQ_MCP_POLL_INTERVAL = float(env_int("RQ_MCP_POLL_INTERVAL", 2))
# The gateway: how long after a call's hold settled the same tool and arguments are still that call
# (a retry whose answer was lost), not a new one (docs/decisions.md, "MCP").
RQ_MCP_RETRY_WINDOW = env_int("RQ_MCP_RETRY_WINDOW", 300)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "axes",
    "holds",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "holds.middleware.ApiErrorMiddleware",
    "holds.logging.RequestIdMiddleware",
    # Last, as django-axes asks: turns a lockout found during sign-in into holds.web.login.locked_out's page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "reviewqueue.urls"
WSGI_APPLICATION = "reviewqueue.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
                "holds.words.in_templates",
            ],
        },
    },
]

# PostgreSQL only. Under DEBUG the default is the embedded server that `make run` starts under
# RQ_VAR_DIR (scripts/embedded_postgres.py: a Unix socket in var/pgdata); production sets DATABASE_URL.
if DEBUG:
    DATABASE_URL = env_str(
        "DATABASE_URL", f"postgres://postgres@{quote(str(RQ_VAR_DIR / 'pgdata'), safe='')}/reviewqueue"
    )
else:
    DATABASE_URL = env_str("DATABASE_URL")
    if not DATABASE_URL:
        raise ImproperlyConfigured(
            "DATABASE_URL is required unless DEBUG=1, e.g. postgres://user@host:5432/reviewqueue"
        )
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 0))}
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured(
        f"DATABASE_URL must be a PostgreSQL URL (postgres://...), got {DATABASE_URL.split(':')[0]}://"
    )
# Behind a transaction pooler (PgBouncer, pool_mode = transaction) each transaction may run in another server
# session, so nothing may rely on one: holds/services/gateway.py sends plain text, psycopg prepares nothing, no
# server-side cursors, and the embedded broker polls instead of LISTENing (README, "Production").
RQ_TRANSACTION_POOLER = env_bool("RQ_TRANSACTION_POOLER", False)
if RQ_TRANSACTION_POOLER:
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = None
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def libpq_dsn(database: dict) -> str:
    """The database's libpq connection string, for what connects without Django (the broker)."""
    fields = {"dbname": "NAME", "user": "USER", "password": "PASSWORD", "host": "HOST", "port": "PORT"}
    params = {key: database[name] for key, name in fields.items() if database.get(name)}
    # Query-string options (sslmode, ...) are libpq's too; assume_role is Django's own.
    options = database.get("OPTIONS", {}).items()
    params.update((key, value) for key, value in options if isinstance(value, str | int) and key != "assume_role")
    return make_conninfo(**params)


if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Celery: Redis when REDIS_URL is set, else reviewqueue/broker.py's transport on the app's own
# PostgreSQL database (a real broker between real processes, not eager mode).
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or "rqpg://")
# A message taken by a worker that died without acking it is delivered again after this many seconds.
RQ_BROKER_VISIBILITY_TIMEOUT = env_int("RQ_BROKER_VISIBILITY_TIMEOUT", 3600)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": RQ_BROKER_VISIBILITY_TIMEOUT}
if CELERY_BROKER_URL.startswith("rqpg:"):
    CELERY_BROKER_TRANSPORT_OPTIONS["dsn"] = libpq_dsn(DATABASES["default"])
    CELERY_BROKER_TRANSPORT_OPTIONS["transaction_pooler"] = RQ_TRANSACTION_POOLER
# Extra task modules for a worker, e.g. the bare hop that bench/resume.py measures against.
CELERY_IMPORTS = env_list("RQ_CELERY_IMPORTS", [])
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery's Django fixup closes the database connection before and after every task unless this is
# set; a delivery then paid for a new PostgreSQL connection (more than the delivery itself costs).
# reviewqueue/celery.py closes connections by DB_CONN_MAX_AGE instead, as Django does for requests.
CELERY_DB_REUSE_MAX = 2**62
CELERY_BEAT_SCHEDULE = {
    "relay-due-invocations": {"task": "holds.tasks.relay_due", "schedule": float(RQ_RELAY_INTERVAL)},
    "sweep-expired-holds": {"task": "holds.tasks.sweep_expired", "schedule": float(RQ_SWEEP_INTERVAL)},
    "finish-experiments": {"task": "holds.tasks.finish_experiments", "schedule": float(RQ_RELAY_INTERVAL)},
    "remind-and-catch-up-notifications": {
        "task": "holds.notify_tasks.remind_due",
        "schedule": float(RQ_REMIND_INTERVAL),
    },
    "escalate-pending-holds": {"task": "holds.notify_tasks.escalate_due", "schedule": float(RQ_REMIND_INTERVAL)},
    "seal-ops-hours": {"task": "holds.notify_tasks.ops_rollup", "schedule": float(RQ_ROLLUP_INTERVAL)},
    "fold-pending-counts": {"task": "holds.notify_tasks.fold_pending", "schedule": 10.0},
    "close-slack-messages": {"task": "holds.notify_tasks.close_slack", "schedule": float(RQ_SLACK_CLOSE_INTERVAL)},
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# django-axes first: it refuses a locked-out username and address before any password is checked.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "queue"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = RQ_VAR_DIR / "static"
MEDIA_ROOT = RQ_MEDIA_ROOT
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# Request bodies: the API reads raw bodies itself with its own limits (413 before parsing).
DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024

# Mail: SMTP configured from the environment in production; the console (mail printed to the log)
# is the default only with DEBUG. Another backend (EMAIL_BACKEND) takes no SMTP options.
SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
MAILERS = {
    "default": {
        "BACKEND": env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend" if DEBUG else SMTP_BACKEND)
    }
}
if MAILERS["default"]["BACKEND"] == SMTP_BACKEND:
    MAILERS["default"]["OPTIONS"] = {
        "host": env_str("EMAIL_HOST", "localhost"),
        "port": env_int("EMAIL_PORT", 0) or None,  # None: 587 with TLS, else 25
        "username": env_str("EMAIL_HOST_USER", ""),
        "password": env_str("EMAIL_HOST_PASSWORD", ""),
        "use_tls": env_bool("EMAIL_USE_TLS", False),
        # A mail server that never answers must not hold a worker thread for ever.
        "timeout": env_int("EMAIL_TIMEOUT", 10),
    }

# Security: safe by default, relaxed only for local DEBUG.
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
# A load balancer probes health over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
RQ_BEHIND_PROXY = env_bool("RQ_BEHIND_PROXY", False)
if RQ_BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Everything an agent wrote is shown in these pages: scripts only from here, with a nonce.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF, CSP.NONCE],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Rate limits (holds/ratelimit.py): "N/period", e.g. "30/m", "20/5m"; "off" disables one.
RQ_RATE_ASK = env_str("RQ_RATE_ASK", "30/m")  # per run token
RQ_RATE_DECISION = env_str("RQ_RATE_DECISION", "120/m")  # per service-account key or person
RQ_RATE_LOGIN = env_str("RQ_RATE_LOGIN", "20/5m")  # failed sign-ins per client address
RQ_RATE_RUN_START = env_str("RQ_RATE_RUN_START", "120/m")  # POST /v0/runs per caller (token, key, person)
RQ_RATE_CLAIM = env_str("RQ_RATE_CLAIM", "30/h")  # claims and releases of holds per person (each is audited)
RQ_RATE_DATASET = env_str("RQ_RATE_DATASET", "600/h")  # dataset items added per caller
RQ_RATE_EXPERIMENT_RUNS = env_str("RQ_RATE_EXPERIMENT_RUNS", "1000/h")  # runs that experiments start, per caller
RQ_DATASET_MAX_ITEMS = env_int("RQ_DATASET_MAX_ITEMS", 1000)  # live items of one dataset (and runs of one experiment)
# Per-run quotas: past one, the write answers 409 quota_exceeded naming it.
RQ_RUN_MAX_FILES = env_int("RQ_RUN_MAX_FILES", 50)
RQ_RUN_MAX_FILE_BYTES = env_int("RQ_RUN_MAX_FILE_BYTES", 200 * 1024 * 1024)
RQ_RUN_MAX_STATE_KEYS = env_int("RQ_RUN_MAX_STATE_KEYS", 100)
RQ_RUN_MAX_STATE_BYTES = env_int("RQ_RUN_MAX_STATE_BYTES", 8 * 1024 * 1024)
# The RQ_RUN_MAX_* quotas bound a whole run tree (a root run and its child runs); these bound every
# tree that one person or service-account key started (issue 30.4).
RQ_CALLER_MAX_FILES = env_int("RQ_CALLER_MAX_FILES", 5000)
RQ_CALLER_MAX_FILE_BYTES = env_int("RQ_CALLER_MAX_FILE_BYTES", 20 * 1024 * 1024 * 1024)
RQ_CALLER_MAX_STATE_BYTES = env_int("RQ_CALLER_MAX_STATE_BYTES", 512 * 1024 * 1024)
# Sign-in lockout (django-axes): this many failures for one username from one address lock that
# pair out for the cool-off (hours, a float); a success resets the count.
AXES_FAILURE_LIMIT = env_int("RQ_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = env_int("RQ_LOGIN_COOLOFF_MINUTES", 15) / 60
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "holds.web.login.locked_out"
AXES_CLIENT_IP_CALLABLE = "holds.ratelimit.client_ip"

# JSON lines in production (one object per line, with request/run/hold/invocation ids where known);
# readable lines with the same ids under DEBUG. RQ_LOG_FORMAT=json|text overrides.
RQ_LOG_FORMAT = env_str("RQ_LOG_FORMAT", "text" if DEBUG else "json")
if RQ_LOG_FORMAT not in ("json", "text"):
    raise ImproperlyConfigured(f"RQ_LOG_FORMAT must be json or text, got {RQ_LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "holds.logging.ContextFilter"}},
    "formatters": {
        "json": {"()": "holds.logging.JsonFormatter"},
        "text": {
            "format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s",
            "defaults": {"request_id": "-"},
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "filters": ["context"], "formatter": RQ_LOG_FORMAT},
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}
