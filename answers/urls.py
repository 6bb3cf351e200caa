from __future__ import annotations

from django.urls import path

from . import views

app_name = "answers"

urlpatterns = [
    path("documents/<int:document_id>/", views.document_detail, name="document"),
]
