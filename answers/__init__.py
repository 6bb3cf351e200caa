"""Cited Answers: ask questions of your own documents, get answers whose citations are true."""
