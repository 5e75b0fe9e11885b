"""A stored traceback split into frames, each the application's or not (deadletters.tracebacks)."""

from deadletters.tracebacks import split

TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/.venv/lib/python3.13/site-packages/jobqueue/worker.py", line 300, in _run
    result = handler(*args)
             ^^^^^^^^^^^^^^
  File "/work/redrive/jobqueue/workflows.py", line 40, in run
    return body()
  File "/srv/app/shop/tasks.py", line 12, in send_receipt
    client.post(url)
  File "/srv/app/.venv/lib/python3.13/site-packages/requests/api.py", line 115, in post
    return request("post", url)
  File "/usr/lib/python3.13/socket.py", line 850, in create_connection
    raise exceptions[0]
  File "<frozen importlib._bootstrap>", line 1, in _load
ConnectionRefusedError: [Errno 111] Connection <refused>
"""


def test_frames_are_the_applications_unless_a_library_the_stdlib_or_redrives():
    tb = split(TRACEBACK)
    frames = [b for b in tb.blocks if b.kind == "frame"]
    assert [f.application for f in frames] == [False, False, True, False, False, False]
    assert (tb.frames, tb.application_frames, tb.folds) == (6, 1, True)
    # A frame keeps its source line and markers; the exception is a text block of its own.
    assert frames[0].text.endswith("^^^^^^^^^^^^^^\n")
    assert tb.blocks[-1].kind == "text" and tb.blocks[-1].text.startswith("ConnectionRefused")
    # Each run of other frames is preceded by a fold counting them.
    assert [(b.kind, b.hidden) for b in tb.blocks if b.kind != "frame"] == [
        ("text", 0), ("fold", 2), ("fold", 3), ("text", 0),
    ]  # fmt: skip
    # Nothing is lost: the blocks are the text.
    assert "".join(b.text for b in tb.blocks) == TRACEBACK


def test_nothing_folds_without_frames_of_both_kinds():
    assert not split("ValueError: no frames at all").folds
    only_libraries = split('  File "/usr/lib/python3.13/json/decoder.py", line 1, in f\nE: x\n')
    assert (only_libraries.frames, only_libraries.folds) == (1, False)
    assert split("").blocks == []
