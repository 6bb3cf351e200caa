"""A fresh clone running the README's newcomer commands exactly as written.

The tree is copied as git sees it (committed plus untracked-but-not-ignored files, so work
not yet committed is in it; in CI that is the clone). To stay fast it does not reinstall:
the copy's ``.venv`` is a directory whose ``bin`` and ``lib`` link to the virtualenv
running the tests, with its own ``.installed`` stamp, so ``make run`` finds everything installed
and never writes into the shared virtualenv. Python imports the copy's own ``answers`` and
``config`` (the script's folder, and daphne's ``.``, come before the editable install).
Everything else is as a newcomer has it: no DJANGO_*/ANSWERS_* variables, no database, no
``.env``, ``make run`` on a free PORT, then the README's commands in that folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from bs4 import BeautifulSoup

from tests.live import REPO_ROOT

README = REPO_ROOT / "README.md"
START_TIMEOUT = 90.0  # migrate + the demo corpus + daphne; about 15 s here


def _newcomer_section() -> str:
    text = README.read_text()
    match = re.search(r"^## Two commands\n(.*?)^## ", text, re.S | re.M)
    assert match, "README has no '## Two commands' section"
    return match.group(1)


def _commands_after_make_run() -> list[str]:
    """The shell block that follows `make run` in the README: one command a line
    (continuations joined, trailing comments dropped)."""
    blocks = re.findall(r"```sh\n(.*?)```", _newcomer_section(), re.S)
    assert len(blocks) >= 2, "README: the `make run` block, then the commands to run next"
    assert re.search(r"^make run\b", blocks[0], re.M)
    lines = blocks[1].replace("\\\n", " ").splitlines()
    return [re.split(r"\s{2,}#", line)[0].strip() for line in lines if line.strip()]


def _copy_tree(target: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if not source.is_file():  # deleted in the working tree, not yet committed
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / name)


def _link_venv(target: Path) -> None:
    venv = Path(sys.prefix)  # the virtualenv running the tests (`make test`: .venv)
    if not (venv / "pyvenv.cfg").exists():
        pytest.skip("the tests do not run in a virtualenv to lend the copy")
    copy = target / ".venv"
    copy.mkdir()
    shutil.copy2(venv / "pyvenv.cfg", copy / "pyvenv.cfg")
    for part in ("bin", "lib", "lib64", "include"):
        if (venv / part).exists():
            (copy / part).symlink_to(venv / part)
    (copy / ".installed").touch()  # newer than the copied pyproject.toml: nothing to install


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _newcomer_env() -> dict[str, str]:
    dropped = ("DATABASE_URL", "REDIS_URL", "VIRTUAL_ENV", "PYTHONPATH", "PORT", "HOST")
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "ANSWERS_", "MAKE", "OPENAI_")) and k not in dropped
    }


def _wait_for_login_page(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"make run exited ({server.returncode}):\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"make run did not serve {url}:\n{log.read_text()[-4000:]}")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_fresh_clone_runs_the_readme_commands_as_written(tmp_path: Path) -> None:
    clone = tmp_path / "cited-answers"
    clone.mkdir()
    _copy_tree(clone)
    assert not (clone / ".env").exists() and not (clone / "db.sqlite3").exists()
    _link_venv(clone)
    env = _newcomer_env()
    port = _free_port()
    log = tmp_path / "make-run.log"
    with log.open("wb") as out:
        # A session of its own, so the whole `make run` (make, daphne) stops at the end.
        server = subprocess.Popen(
            ["make", "run", f"PORT={port}"],
            cwd=clone,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_login_page(f"{base}/accounts/login/", server, log)
        started = log.read_text()
        assert "username: admin" in started and "password: " in started
        assert (clone / ".env").exists()
        outputs: dict[str, str] = {}
        token = ""
        for command in _commands_after_make_run():
            # The README's placeholders: the token just printed, and the port we serve on.
            runnable = command.replace("ca_...", token).replace(
                "127.0.0.1:8000", f"127.0.0.1:{port}"
            )
            result = subprocess.run(
                ["bash", "-c", runnable],
                cwd=clone,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
            assert "Traceback" not in result.stderr, f"{command}\n{result.stderr}"
            outputs[command.split()[2] if command.startswith(".venv") else command.split()[0]] = (
                result.stdout
            )
            if "createapitoken" in command:
                token = result.stdout.strip().splitlines()[-1]
                assert token.startswith("ca_")
        if "bootstrap" in outputs:  # `--reset-password`: the new password logs in
            password = outputs["bootstrap"].strip().splitlines()[-1].split("password: ")[-1]
            _log_in(base, password)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=15)

    assert {"createapitoken", "curl"} <= outputs.keys()
    answer = json.loads(outputs["curl"])
    assert answer["status"] == "complete" and answer["references"], answer
    if "ask" in outputs:
        assert "Sources" in outputs["ask"]


def _log_in(base: str, password: str) -> None:
    login = f"{base}/accounts/login/"
    with httpx.Client(timeout=10) as browser:
        page = BeautifulSoup(browser.get(login).text, "html.parser")
        csrf = page.select_one('input[name="csrfmiddlewaretoken"]')["value"]
        response = browser.post(
            login,
            data={"username": "admin", "password": password, "csrfmiddlewaretoken": csrf},
            headers={"Referer": login},
        )
    assert response.status_code == 302, response.text[-2000:]


def _layout() -> str:
    text = README.read_text()
    start = text.index("## Layout")
    return text[start : text.index("```\n", text.index("```", start) + 3)]


def _layout_entries() -> dict[str, str]:
    """The README layout's entries: each path (its folders' names joined by indentation)
    and what its line says about it."""
    entries: dict[str, str] = {}
    folders: list[tuple[int, str]] = []
    for line in _layout().splitlines():
        match = re.match(r"^( *)([\w./]+)(?: {2,}(\S.*))?$", line)
        if not match:
            continue
        indent, name = len(match.group(1)), match.group(2)
        folders = [(depth, folder) for depth, folder in folders if depth < indent]
        entries["".join(folder for _, folder in folders) + name] = match.group(3) or ""
        if name.endswith("/"):
            folders.append((indent, name))
    return entries


def test_the_layout_lists_every_module_one_line_each():
    """Every module of the app and the project has a line of its own under its folder,
    saying what it is for (an ``__init__.py`` with no code but its docstring is none)."""
    import ast

    def has_code(path: Path) -> bool:
        tree = ast.parse(path.read_text())
        return path.name != "__init__.py" or len(tree.body) > bool(ast.get_docstring(tree))

    entries = _layout_entries()
    modules = [
        str(path.relative_to(REPO_ROOT))
        for folder in ("answers", "config")
        for path in sorted((REPO_ROOT / folder).rglob("*.py"))
        if "migrations" not in path.parts and has_code(path)
    ]
    missing = [module for module in modules if not entries.get(module)]
    assert not missing, f"README Layout has no line for: {missing}"


# Calls that read an environment variable named by their first argument, and the keyword
# that names one (``Setting(env=...)``, ``dj_database_url.config(env=...)``).
_ENV_READERS = {
    "os.environ.get",
    "os.getenv",
    "env_bool",
    "env_int",
    "env_float",
    "env_list",
    "env_hosts",
    "env_origins",
    "env_log_level",
    "env_redis_url",
}


def _environment_variables_read() -> set[str]:
    import ast

    names: set[str] = set()
    files = [
        path
        for folder in ("answers", "config")
        for path in (REPO_ROOT / folder).rglob("*.py")
        if "migrations" not in path.parts
    ]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                if ast.unparse(node.func) in _ENV_READERS and node.args:
                    first = node.args[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        names.add(first.value)
                for keyword in node.keywords:
                    value = keyword.value
                    if keyword.arg == "env" and isinstance(value, ast.Constant) and value.value:
                        names.add(str(value.value))
            elif (
                isinstance(node, ast.Subscript)
                and ast.unparse(node.value) == "os.environ"
                and isinstance(node.slice, ast.Constant)
            ):
                names.add(str(node.slice.value))
    return names


def test_every_environment_variable_read_is_in_the_table():
    """docs/environment.md lists every variable config/ and answers/ read, and nothing
    else but what `make run` takes (PORT, HOST)."""
    read = _environment_variables_read()
    # The scan itself finds each kind of read: os.environ.get, env_bool, Setting(env=...),
    # dj_database_url's env=.
    assert {"REDIS_URL", "DJANGO_DEBUG", "ANSWERS_PROVIDER", "DATABASE_URL"} <= read, read
    table = (REPO_ROOT / "docs" / "environment.md").read_text()
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    documented = {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row)}
    assert not read - documented, f"docs/environment.md lacks: {sorted(read - documented)}"
    makefile = (REPO_ROOT / "Makefile").read_text()
    taken_by_make = set(re.findall(r"^([A-Z_]+) +\?=", makefile, re.M))
    stale = documented - read - taken_by_make
    assert not stale, f"docs/environment.md lists what nothing reads: {sorted(stale)}"


def test_every_local_link_in_the_readme_and_docs_resolves():
    import re

    pages = [README, *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in pages:
        # Inline code (`[1](url)` in ADR 0004) is an example, not a link.
        prose = re.sub(r"`[^`\n]*`", "", page.read_text())
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", prose):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO_ROOT)} -> {target}")
    assert not broken, broken


def test_selectors_only_query():
    """Selectors read; output (URLs, excerpts, HTML, payloads) is the presenters' job."""
    import ast

    source = (REPO_ROOT / "answers" / "selectors.py").read_text()
    imports = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)]
    modules = {"." * node.level + (node.module or "") for node in imports}
    names = {alias.name for node in imports for alias in node.names}
    output = {"django.urls", "django.shortcuts", "django.utils.html", "django.utils.safestring"}
    output |= {"django.template", "django.template.loader"}
    output |= {".rendering", ".presenters", ".panels", ".markup"}
    assert not modules & output, modules & output
    assert not names & {"reverse", "render_answer_html", "safe_url", "source_anchor", "excerpt"}
    assert "excerpt" not in source


def test_the_sources_panel_is_one_template_file():
    """Every page and the WebSocket render the Sources panel from one partial file."""
    templates = [*(REPO_ROOT / "answers" / "templates").rglob("*.html")]
    templates += [*(REPO_ROOT / "templates").rglob("*.html")]
    defining = [
        str(path.relative_to(REPO_ROOT))
        for path in templates
        if "data-sources-panel" in path.read_text()
    ]
    assert defining == ["answers/templates/answers/sources.html"], defining
    panels = (REPO_ROOT / "answers" / "panels.py").read_text()
    assert '"answers/sources.html#sources-panel"' in panels


def _imports_outside_functions(tree: object) -> tuple[set[str], set[str]]:
    """Top-level names of absolute imports: those run when the module is imported, and
    those only inside a function (an optional extra's, imported when it is used)."""
    import ast

    eager: set[str] = set()
    lazy: set[str] = set()

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module]
            (lazy if in_function else eager).update(name.split(".")[0] for name in names)
            functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            visit(child, in_function or isinstance(child, functions))

    assert isinstance(tree, ast.AST)
    visit(tree, False)
    return eager, lazy


def _installed_by(requirements: list[str]) -> set[str]:
    """Every distribution `pip install` of these requirements brings (as installed here),
    their own dependencies included, normalized."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found: set[str] = set()
    todo = [Requirement(text) for text in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found.add(name)
        for text in metadata.requires(requirement.name) or []:
            needed = Requirement(text)
            extras = requirement.extras or {""}
            if needed.marker is None or any(
                needed.marker.evaluate({"extra": extra}) for extra in extras
            ):
                todo.append(needed)
    return found


def test_the_package_installs_every_library_the_code_imports():
    """`make run` installs `.` alone (no dev extras, which bring more: pytest brings
    Pygments), so everything answers/ and config/ import when loaded must come from the
    dependencies, and what they import only when used from those or an optional extra.
    The fresh-clone test above lends the copy the dev virtualenv and cannot see this."""
    import ast
    import tomllib
    from importlib import metadata

    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    base = _installed_by(project["dependencies"])
    extras = {
        name: _installed_by(requirements)
        for name, requirements in project["optional-dependencies"].items()
        if name != "dev"
    }
    with_extras = base.union(*extras.values())
    provided_by = metadata.packages_distributions()
    missing = []
    for folder in ("answers", "config"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            eager, lazy = _imports_outside_functions(ast.parse(path.read_text()))
            for module, allowed in [(name, base) for name in eager] + [
                (name, with_extras) for name in lazy
            ]:
                if module in sys.stdlib_module_names or module in {"answers", "config"}:
                    continue
                distributions = {canonicalize_name(d) for d in provided_by.get(module, [])}
                if not distributions & allowed:
                    missing.append(f"{path.relative_to(REPO_ROOT)}: {module}")
    assert not missing, f"imported but not installed by pyproject.toml: {missing}"
