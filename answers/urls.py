from __future__ import annotations

from django.urls import path

from . import views

app_name = "answers"

urlpatterns = [
    path("", views.ask, name="ask"),
    path("answers/", views.answer_list, name="answer-list"),
    path("conversations/<uuid:conversation_id>/", views.conversation_detail, name="conversation"),
    path("answers/<int:answer_id>/", views.answer_detail, name="answer"),
    path("documents/<int:document_id>/", views.document_detail, name="document"),
]
