"""Responses that several page modules send."""

from django.http import HttpResponseRedirect


class SeeOther(HttpResponseRedirect):
    """303 after a POST: the browser GETs the page again, and a reload does not post twice."""

    status_code = 303


def see_other(url: str) -> SeeOther:
    return SeeOther(url)
