"""Reviewer pages (HTMX). Thin: parse -> service -> render."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from .models import Hold


@login_required
def queue(request):
    holds = Hold.objects.filter(status=Hold.Status.PENDING).select_related("capability").order_by("-pk")[:50]
    return render(request, "holds/queue.html", {"holds": holds})
