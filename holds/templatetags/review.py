"""Template helpers for agent text: escaping with hidden characters shown, typed values, times."""

from datetime import datetime

from django import template
from django.utils import timezone

from .. import rendering
from ..words import Action

register = template.Library()


@register.filter
def visible(text):
    """Escaped text with invisible and bidi characters spelled out as ⟦U+XXXX⟧."""
    return rendering.visible(text)


@register.filter
def text_flags(text):
    return rendering.text_flags(text or "")


@register.inclusion_tag("holds/_value.html")
def json_value(value, with_type=False):
    """A value exactly as it will be sent: its full text, any warning, and (with_type) its JSON type."""
    return {"shown": rendering.show_value(value), "with_type": with_type}


@register.filter
def confidence_level(value):
    return rendering.confidence_level(value)


@register.filter
def age(moment: datetime | None) -> str:
    if moment is None:
        return ""
    return rendering.span((timezone.now() - moment).total_seconds())


@register.filter
def time_left(moment: datetime | None) -> str:
    if moment is None:
        return "no expiry"
    seconds = (moment - timezone.now()).total_seconds()
    return "expired" if seconds <= 0 else rendering.span(seconds) + " left"


@register.filter
def soon(moment: datetime | None) -> bool:
    """Under an hour left: the queue says so in colour as well as in words."""
    return moment is not None and (moment - timezone.now()).total_seconds() < 3600


@register.filter
def iso(moment: datetime | None) -> str:
    return moment.isoformat() if moment else ""


@register.filter
def action_label(action: str) -> str:
    return Action(action).label if action in Action.values else action


@register.filter
def file_size(size: int) -> str:
    size = int(size or 0)
    for unit in ("bytes", "KB", "MB"):
        if size < 1024 or unit == "MB":
            return f"{size} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)
