from __future__ import annotations

from django.urls import path

from .consumers import AnswerConsumer

websocket_urlpatterns = [path("ws/answers/", AnswerConsumer.as_asgi())]
