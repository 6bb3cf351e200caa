from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

REQUIRED = [
    "script-src 'self'",
    "object-src 'none'",
    "frame-ancestors 'none'",
    "img-src 'self'",
    "connect-src 'self'",
    "style-src 'self'",
]


@pytest.mark.parametrize("path", ["/", "/answers/", "/accounts/login/", "/admin/", "/api/docs"])
def test_every_page_has_a_strict_content_security_policy(admin_client, path):
    response = admin_client.get(path)
    assert response.status_code == 200
    policy = response["Content-Security-Policy"]
    for directive in REQUIRED:
        assert directive in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy


def test_the_api_docs_load_their_assets_from_this_site(admin_client):
    html = admin_client.get("/api/docs").content.decode()
    assert "cdn." not in html and "/static/ninja/swagger-ui-bundle.js" in html


def test_pages_have_no_inline_scripts_or_styles(client, asker):
    from bs4 import BeautifulSoup

    client.force_login(asker)
    soup = BeautifulSoup(client.get("/").content, "html.parser")
    for script in soup.find_all("script"):
        assert script.get("src") or script.get("type") == "application/json"
    assert not soup.find_all("style") and not soup.select("[style]")
