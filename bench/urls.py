"""Bare baseline views for bench/ask.py, mounted only when RQ_BENCH_VIEWS=1."""

from django.urls import path

from . import bare_views

urlpatterns = [
    path("bare-insert", bare_views.bare_insert),
    path("bare-bulk", bare_views.bare_bulk),
]
