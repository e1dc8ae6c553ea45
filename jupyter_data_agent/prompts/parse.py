"""Turn raw model output into one code cell split into explained steps.

Models do not stop where we would like: completion models run on into the
next ``# In[ ]:`` cell or invent a new ``# Problem:``; chat models wrap code
in prose and fences. Parsing is deliberately lenient about format (``# Step
1:`` / ``# Step 1.`` / ``#Step 1 -``) and strict only about one thing: there
must be some code, otherwise :class:`UnparsableOutput` tells the caller to
discard the sample rather than offer an empty cell.

Code before the first ``# Step`` marker (imports, say) becomes step 0 with no
explanation, instead of being silently credited to step 1's explanation; a
reply without any markers is therefore a single step 0.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from .arcade import STEP_PREFIX


class UnparsableOutput(ValueError):
    """The model's output holds no code; the sample should be discarded.

    ``stats`` is the failed turn's ``SearchStats`` when a strategy raises it: the
    model calls and tokens were spent all the same (usage, benchmarks).
    """

    def __init__(self, message: str, stats: object | None = None) -> None:
        super().__init__(message)
        self.stats = stats


class ProseAnswer(UnparsableOutput):
    """The model answered a question in words, with no code: the words are the answer.

    A question typed in the composer ("what does this column mean?") may get a prose
    reply; it is shown as the turn's answer rather than discarded as unparsable.
    """

    def __init__(self, message: str, text: str, stats: object | None = None) -> None:
        super().__init__(message, stats)
        self.text = text


@dataclass
class Step:
    number: int
    explanation: str
    code: str


@dataclass
class ParsedCode:
    """``code`` is the whole cell as it will be inserted (step comments kept)."""

    code: str
    steps: list[Step] = field(default_factory=list)

    @property
    def explanation(self) -> str:
        """The step explanations as a short numbered summary for the UI."""
        return "\n".join(f"Step {s.number}: {s.explanation}" for s in self.steps if s.explanation)


_STEP_RE = re.compile(r"^\s*#\s*step\s*(\d+)\s*(?:[:.)\-\u2013\u2014]+\s*)?(.*?)\s*$", re.I)
_CELL_HEADER_RE = re.compile(r"^\s*#\s*In\s*\[[^\]]*\]\s*:?\s*$")
_PROBLEM_RE = re.compile(r"^\s*#\s*Problem\s*:", re.I)
_SOLUTION_RE = re.compile(r"^\s*#\s*Solution\s*:", re.I)
_FENCE_LINE_RE = re.compile(r"^\s*(```|~~~)")
FENCE_RE = re.compile(
    r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)[^\n]*\n"
    r"(?P<body>.*?)"
    r"(?:^[ \t]{0,3}(?P=fence)[`~]*[ \t]*$|\Z)",
    re.M | re.S,
)
PY_LANGS = frozenset({"", "python", "py", "python3", "py3", "ipython", "ipython3", "jupyter"})
# Special tokens some servers leave in the text.
_END_TOKENS = ("<|endoftext|>", "<|im_end|>", "<|end|>", "<|eot_id|>", "</s>", "<|EOT|>")


def stop_sequences() -> tuple[str, ...]:
    """Stop strings for completion-mode generation (at most 4, as OpenAI allows)."""
    return ("# In[ ]:", "\n# In[", "\n# Problem:")


def cut_end_tokens(text: str) -> str:
    """The text before the first special token a server left in."""
    for tok in _END_TOKENS:
        text = text.split(tok, 1)[0]
    return text


def _cut_at_stop(text: str) -> str:
    """The first cell: drop leading cell headers, stop at the next header,
    a new ``# Problem:`` or a closing fence."""
    lines = cut_end_tokens(text).splitlines()
    i = 0
    while i < len(lines) and (not lines[i].strip() or _CELL_HEADER_RE.match(lines[i])):
        i += 1
    kept = []
    for line in lines[i:]:
        if _CELL_HEADER_RE.match(line) or _PROBLEM_RE.match(line) or _FENCE_LINE_RE.match(line):
            break
        kept.append(line)
    return "\n".join(kept)


def _is_code_line(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith("#")


def split_steps(code: str) -> list[Step]:
    """Steps by ``# Step N`` markers; comment lines right after a marker
    continue its explanation (models wrap long explanations)."""
    steps: list[Step] = []
    preamble: list[str] = []
    body: list[str] = []
    current: Step | None = None
    in_explanation = False

    def close() -> None:
        if current is not None:
            current.code = "\n".join(body).strip("\n")

    for line in code.splitlines():
        m = _STEP_RE.match(line)
        if m:
            close()
            current = Step(int(m.group(1)), m.group(2).strip(), "")
            steps.append(current)
            body = []
            in_explanation = True
            continue
        if current is None:
            preamble.append(line)
            continue
        stripped = line.strip()
        if in_explanation and stripped.startswith("#") and stripped.lstrip("#").strip():
            current.explanation = f"{current.explanation} {stripped.lstrip('#').strip()}".strip()
            continue
        in_explanation = False
        body.append(line)
    close()
    pre = "\n".join(preamble).strip("\n")
    if pre.strip():
        steps.insert(0, Step(0, "", pre))
    return steps


def _finish(code: str, what: str) -> ParsedCode:
    lines = code.splitlines()
    while lines and (not lines[0].strip() or _SOLUTION_RE.match(lines[0])):
        lines.pop(0)
    code = "\n".join(lines).rstrip()
    if not any(_is_code_line(line) for line in lines):
        raise UnparsableOutput(f"the model's {what} holds no code (only text or comments)")
    return ParsedCode(code=code, steps=split_steps(code))


def parse_completion(text: str, prefix: str = STEP_PREFIX) -> ParsedCode:
    """Code of a completion-mode sample; ``prefix`` is what the prompt ended
    with (``BuiltPrompt.prefix``) and is put back in front of the sample."""
    if prefix and not text.lstrip().startswith(prefix.strip()):
        text = prefix + text
    return _finish(_cut_at_stop(text), "completion")


def looks_like_code(text: str) -> str | None:
    """Unfenced chat replies: the longest stretch that parses as Python and is
    not just words (``Sure`` parses as a name), trimming a few prose lines at
    either end ("Here is the code:")."""
    lines = text.strip().splitlines()
    n = len(lines)
    for start in range(min(n, 6)):
        for end in range(n, max(start, n - 6), -1):
            chunk = "\n".join(lines[start:end])
            if not chunk.strip():
                continue
            try:
                tree = ast.parse(chunk)
            except SyntaxError:
                continue
            if not all(isinstance(s, ast.Expr) and isinstance(s.value, (ast.Constant, ast.Name))
                       for s in tree.body):
                return chunk
    return None


def parse_chat(text: str) -> ParsedCode:
    """Code of a chat reply: the first python (or untagged) fenced block; if
    there is none, the reply itself when it looks like code."""
    for m in FENCE_RE.finditer(text):
        if m.group("lang").lower() not in PY_LANGS:
            continue
        body = _cut_at_stop(m.group("body"))
        if any(_is_code_line(line) for line in body.splitlines()):
            return _finish(body, "reply")
    code = looks_like_code(text)
    if code is None:
        raise UnparsableOutput("the model's reply has no ```python block and does not look like code")
    return _finish(_cut_at_stop(code), "reply")


def parse_output(text: str, *, chat: bool, prefix: str = STEP_PREFIX) -> ParsedCode:
    return parse_chat(text) if chat else parse_completion(text, prefix)


__all__ = [
    "ProseAnswer",
    "ParsedCode",
    "Step",
    "UnparsableOutput",
    "parse_chat",
    "parse_completion",
    "parse_output",
    "split_steps",
    "stop_sequences",
]
