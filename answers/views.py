"""Server-rendered pages. Thin: selectors read, templates render."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from . import selectors


@login_required
def document_detail(request: HttpRequest, document_id: int) -> HttpResponse:
    try:
        document = selectors.document_get_visible(user=request.user, document_id=document_id)
    except selectors.NotFound:
        raise Http404("No such document.") from None
    chunks = list(document.chunks.order_by("ordinal"))
    return render(request, "answers/document.html", {"document": document, "chunks": chunks})
