"""The layers the code keeps (pyproject.toml's [tool.importlinter] contracts), checked on every
run of the suite: an import that crosses one fails here, naming the chain of imports."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_layer_contract_is_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert "BROKEN" not in result.stdout, result.stdout
    assert result.returncode == 0, result.stdout + result.stderr
    # Every contract the file declares was checked (none skipped by a typo in its type).
    assert "5 kept, 0 broken" in result.stdout, result.stdout


LIBRARY = ("jobqueue", "deadletters")
LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical", "log"}


def hand_formatted_event_lines(source: str) -> list[int]:
    """Lines of `source` calling a logger method with a literal message that starts an event
    line ("event=..."): its values go in unescaped, so a task path, queue or error holding a
    space, quote or newline breaks or forges the line. jobqueue.logfmt.log_line escapes each."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in LOG_METHODS:
            continue
        for arg in node.args[:2]:  # log(level, msg) or info(msg)
            text = arg.value if isinstance(arg, ast.Constant) else None
            if isinstance(arg, ast.JoinedStr) and isinstance(arg.values[0], ast.Constant):
                text = arg.values[0].value
            if isinstance(text, str) and text.startswith("event="):
                found.append(node.lineno)
    return found


def test_the_scan_finds_a_hand_formatted_event_line():
    assert hand_formatted_event_lines('log.warning("event=x a=%s", a)\n') == [1]
    assert hand_formatted_event_lines('logger.log(30, f"event=x a={a}")\n') == [1]
    assert hand_formatted_event_lines('log_line(log, 30, "x", a=a)\n') == []


def test_every_event_line_of_the_library_goes_through_logfmt():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in LIBRARY
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
        for line in hand_formatted_event_lines(path.read_text())
    ]
    assert found == [], "hand-formatted event lines (use jobqueue.logfmt.log_line):\n" + "\n".join(
        found
    )
