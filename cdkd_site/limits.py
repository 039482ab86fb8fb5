"""Refuse a request whose body is too big before anything reads it.

Django streams a multipart upload to a temporary file as it parses it, and the views check
an assembly's size only once the upload is complete, so without this a single request (even
one that is refused afterwards, or one without a login: the CSRF check reads the form first)
could write gigabytes to disk. The declared Content-Length is checked first; a body without
one is read as empty by Django, so that is the whole of it."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse


class RequestBodyLimit:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0  # Django reads such a body as empty too
        limit = settings.CDKD_REQUEST_MAX_BYTES
        if length > limit:
            message = f"The request body is {length} bytes, over the limit of {limit} (CDKD_REQUEST_MAX_BYTES)."
            if request.path.startswith("/api/"):
                return JsonResponse({"message": message}, status=413)
            return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
