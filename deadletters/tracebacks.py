"""A stored traceback split into its frames, each marked as the application's or not, so the
console can show the application's frames first and fold the rest (Mission Control's
"application frames only"). Read from the text alone: the traceback may come from a worker on
another host, whose paths this process cannot look up."""

import re
from dataclasses import dataclass, field

FRAME = re.compile(r'^(?P<indent>\s*)File "(?P<path>[^"]*)", line \d+(?:, in .*)?$')

# Not the application's: installed packages, the standard library (and its frozen modules), and
# Redrive's own machinery (the worker, workflows, the console) a job's call goes through.
NOT_APPLICATION = re.compile(
    r"[/\\](?:site|dist)-packages[/\\]"
    r"|[/\\]lib[/\\]python\d+(?:\.\d+)?[/\\]"
    r"|^<frozen |^<string>$"
    r"|(?:^|[/\\])(?:jobqueue|deadletters)[/\\]"
)


@dataclass
class Block:
    kind: str  # "text" (a header, the exception), "frame", or "fold" (frames hidden before it)
    text: str
    application: bool = True
    hidden: int = 0  # a fold's count of frames


@dataclass
class Traceback:
    blocks: list[Block] = field(default_factory=list)
    frames: int = 0
    application_frames: int = 0

    @property
    def folds(self) -> bool:
        """Whether there are frames to fold: some of the application's and some not."""
        return 0 < self.application_frames < self.frames


def is_application(path: str) -> bool:
    return not NOT_APPLICATION.search(path)


def split(text: str) -> Traceback:
    """`text` as blocks, in order; a run of frames not the application's is preceded by a fold
    that counts them. Lines that are not part of a frame (headers, the exception, a chained
    one's "During handling of…") are text blocks, always shown."""
    result = Traceback()
    frame_indent = None
    for line in str(text).splitlines(keepends=True):
        match = FRAME.match(line.rstrip("\r\n"))
        if match:
            application = is_application(match["path"])
            result.frames += 1
            result.application_frames += application
            result.blocks.append(Block("frame", line, application))
            frame_indent = len(match["indent"])
            continue
        indent = len(line) - len(line.lstrip())
        previous = result.blocks[-1] if result.blocks else None
        if previous and previous.kind == "frame" and line.strip() and indent > frame_indent:
            previous.text += line  # the frame's source line and its ^^^ markers
            continue
        if previous and previous.kind == "text":
            previous.text += line
        else:
            result.blocks.append(Block("text", line))
        frame_indent = None
    # A fold before each run of frames not the application's.
    blocks = []
    for block in result.blocks:
        if block.kind == "frame" and not block.application:
            if not (blocks and blocks[-1].kind == "frame" and not blocks[-1].application):
                blocks.append(Block("fold", "", application=False))
            fold = next(b for b in reversed(blocks) if b.kind == "fold")
            fold.hidden += 1
        blocks.append(block)
    result.blocks = blocks
    return result
