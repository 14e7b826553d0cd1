"""Turn raw model output for a slot into safe docstring text, or admit it cannot and give a neutral fallback.

Safe means: one line, no backslashes (D301), no quote runs that could end the literal, capitalised (D403),
ending with a period (D400/D415), and, for a function summary, imperative mood (D401 in numpy and pep257).
"""

from __future__ import annotations

import re

# First words that ruff's D401 rejects (pydocstyle's blacklist), in lower case.
NON_IMPERATIVE = {
    "a", "an", "the", "action", "always", "api", "base", "basic", "business", "calculation", "callback",
    "collection", "common", "constructor", "convenience", "convenient", "current", "currently", "custom",
    "data", "default", "deprecated", "description", "dict", "dictionary", "does", "dummy", "example",
    "factory", "false", "final", "formula", "function", "generic", "handler", "helper", "here", "hook",
    "implementation", "importantly", "internal", "it", "main", "method", "module", "new", "number",
    "optional", "package", "placeholder", "reference", "route", "simple", "some", "this", "todo", "true",
    "unique", "unit", "utility", "what", "wrapper",
}  # fmt: skip
# Verbs whose third person ("Returns") a model likes to write; mapped back to the imperative ("Return").
VERBS = {
    "accept", "add", "adjust", "allocate", "append", "apply", "assert", "assign", "build", "calculate",
    "call", "cancel", "check", "clean", "clear", "close", "collect", "combine", "compare", "compile",
    "compute", "configure", "connect", "construct", "contain", "convert", "copy", "count", "create",
    "decode", "delete", "describe", "determine", "disable", "display", "do", "download", "draw", "dump",
    "emit", "enable", "encode", "ensure", "evaluate", "execute", "expand", "extend", "extract", "fetch",
    "fill", "filter", "find", "finish", "fit", "flush", "format", "generate", "get", "give", "handle",
    "hash", "hold", "ignore", "implement", "import", "increment", "initialize", "initialise", "insert",
    "install", "invoke", "iterate", "join", "keep", "load", "log", "look", "make", "map", "mark", "match",
    "merge", "move", "normalize", "open", "output", "pack", "parse", "pass", "perform", "pick", "plot",
    "pop", "prepare", "print", "process", "produce", "provide", "push", "put", "raise", "read", "receive",
    "record", "reduce", "refresh", "register", "reload", "remove", "rename", "render", "replace", "report",
    "represent", "request", "reset", "resolve", "restore", "retrieve", "return", "reverse", "run", "sample",
    "save", "scan", "search", "select", "send", "serialize", "set", "setup", "show", "sort", "split",
    "start", "stop", "store", "strip", "sum", "take", "test", "tokenize", "track", "transform", "translate",
    "try", "turn", "unpack", "update", "upload", "use", "validate", "verify", "visit", "wait", "walk",
    "wrap", "write", "yield",
    "abort", "acquire", "activate", "adapt", "aggregate", "align", "allow", "analyze", "analyse", "annotate",
    "approve", "assemble", "attach", "authenticate", "authorize", "bind", "broadcast", "bump", "cast",
    "capture", "chain", "change", "choose", "clip", "clone", "coerce", "commit", "complete", "compress",
    "concatenate", "consume", "crop", "deactivate", "decompress", "decorate", "decrement", "decrypt",
    "define", "deny", "deprecate", "dequeue", "deserialize", "destroy", "detach", "detect", "disconnect",
    "dispatch", "divide", "drop", "edit", "embed", "encrypt", "enqueue", "enter", "escape", "estimate",
    "exit", "explain", "export", "fail", "flatten", "flip", "fold", "force", "freeze", "gather", "guess",
    "hide", "include", "infer", "inject", "inspect", "integrate", "interpolate", "invalidate", "invert",
    "kill", "launch", "lex", "limit", "link", "list", "listen", "lock", "lookup", "lower", "maximize",
    "measure", "minimize", "modify", "mount", "multiply", "negate", "notify", "obtain", "optimize", "override",
    "pad", "patch", "pause", "permute", "poll", "populate", "predict", "preprocess", "preserve", "prune",
    "publish", "quote", "rank", "rebuild", "recompute", "redirect", "refine", "reject", "release", "remap",
    "reorder", "repeat", "resample", "reshape", "resize", "resume", "retry", "revert", "rewrite", "rotate",
    "round", "route", "scale", "schedule", "seed", "shift", "shuffle", "shutdown", "simplify", "simulate",
    "skip", "slice", "solve", "spawn", "squeeze", "stream", "submit", "substitute", "subtract", "suppress",
    "swap", "sync", "synchronize", "tag", "teardown", "toggle", "trace", "train", "transpose", "traverse",
    "trigger", "trim", "truncate", "unbind", "unlock", "unmount", "unquote", "unregister", "unwrap", "upgrade",
    "upper", "view", "warn", "watch",
}  # fmt: skip
_LEADING_FILLER = re.compile(
    r"^(?:(?:this|the|a|an)\s+(?:function|method|helper|class|property|routine|generator|decorator)\s+"
    r"(?:will\s+|that\s+|which\s+|is\s+used\s+to\s+|to\s+|for\s+)?"
    r"|(?:function|method|helper|wrapper|utility)\s+(?:to|that|which|for)\s+)",
    re.IGNORECASE,
)
_MARKUP = re.compile(r"^(?:[#*>\-:|`'\"]+\s*)+")


def base_form(word: str) -> str | None:
    """ "returns" -> "return", "applies" -> "apply", "pushes" -> "push"; None if not a known verb."""
    w = word.lower()
    if w in VERBS:
        return w
    candidates = []
    if w.endswith("ies"):
        candidates.append(w[:-3] + "y")
    if w.endswith("es"):
        candidates.append(w[:-2])
    if w.endswith("s"):
        candidates.append(w[:-1])
    if w == "does":
        return "do"
    return next((c for c in candidates if c in VERBS), None)


def one_line(raw: str) -> str:
    """The first meaningful line of `raw`, with characters that could break the literal removed."""
    for line in raw.replace("\r", "\n").split("\n"):
        line = re.sub(r"\\[nrt](?![a-z])", " ", line)  # an escape sequence written out as text
        line = line.replace("\\", "").replace("\t", " ")
        line = re.sub(r"[\"']{3,}", "", line)
        line = "".join(ch for ch in line if ch.isprintable())
        line = _MARKUP.sub("", line.strip())
        line = " ".join(line.split())
        if sum(ch.isalpha() for ch in line) >= 2:
            return line
    return ""


def degenerate(text: str) -> bool:
    """Output a model gives when it is lost: a chunk repeated over and over, or a 'word' no language has."""
    if re.search(r"(.{2,}?)\1{3,}", text, re.IGNORECASE):
        return True
    words = text.split()
    if any(len(w) > 40 for w in words):
        return True
    return len(words) >= 6 and len({w.lower() for w in words}) <= len(words) // 3


_DANGLING = {
    "a", "an", "the", "of", "to", "and", "or", "for", "with", "in", "on", "at", "by", "from", "as", "is", "that",
}  # fmt: skip


def cut_repetition(text: str, n: int = 3) -> str:
    """Cut `text` before the first run of `n` words that already occurred in it (a small model's loop), and drop
    the words a cut leaves dangling: "Return the new value of the new value." -> "Return the new value". A noun
    phrase that starts with an article repeats from two words on ("the model to the model"). Less than
    two words left gives "" (nothing usable)."""
    words = text.split(" ")
    keys = [re.sub(r"\W", "", w).lower() for w in words]
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - 1):
        gram = tuple(keys[i : i + n])
        # a repeated noun phrase ("the model of the model") counts from two words on
        short = tuple(keys[i : i + 2]) if keys[i] in ("the", "a", "an") else None
        if (len(gram) == n and gram in seen) or (short is not None and short in seen):
            kept = words[:i]
            while kept and re.sub(r"\W", "", kept[-1]).lower() in _DANGLING:
                kept.pop()
            return " ".join(kept) if len(kept) >= 2 else ""
        seen.add(gram)
        if short is not None:
            seen.add(short)
    return text


def code_like(text: str) -> bool:
    """A "description" that is really code the model copied: an annotation, a default, a call."""
    if re.fullmatch(r"(?i)(int|str|bool|float|list|dict|tuple|set|bytes|none|any|object|callable)\.?", text.strip()):
        return True  # a bare type name
    if re.fullmatch(r"\w+\s*:\s*\w+\.?", text.strip()):
        return True  # "n: int", an annotation
    return bool(re.search(r"\s=\s|==|\w\[|\w\(\)|^\w+\s*\|\s*\w+", text))


def finish(text: str) -> str:
    text = text.strip().rstrip(",;:-–(\"' ")
    if text.count("`") % 2:
        text = text.replace("`", "")
    if text.count("(") != text.count(")"):
        text = text.replace("(", "").replace(")", "")
    text = text.strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    if text[-1] not in ".":
        text = text.rstrip("!?") + "."
    return text


def _first_sentence(text: str) -> str:
    match = re.search(r"(?<=[a-z0-9)\]`])[.!?](?:\s|$)", text)
    return text[: match.start() + 1] if match else text


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: max(limit - 1, 1)]
    if " " in cut:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(",;:- ") + "."


def clean_summary(raw: str, *, name: str, is_function: bool, limit: int) -> str | None:
    """A one-sentence summary from model output, or None when nothing usable is left."""
    text = _first_sentence(one_line(raw))
    if degenerate(text):
        return None
    text = _LEADING_FILLER.sub("", cut_repetition(text)).strip()
    if not text:
        return None
    words = text.split(" ", 1)
    first = re.sub(r"\W", "", words[0])
    if is_function:
        base = base_form(first)
        if base is not None:
            words[0] = base
        elif first.lower() in NON_IMPERATIVE:
            return None
    text = finish(" ".join(words))
    if not text or f"{name.lower()}(" in text.lower():  # D402: the summary must not be the signature
        return None
    first_word = re.sub(r"\W", "", text.split(" ", 1)[0]).lower()
    if is_function and first_word in NON_IMPERATIVE:
        return None
    if not re.search(r"[A-Za-z]{2,}", text):
        return None
    if is_function and len(text.split()) < 2:
        return None  # "Return." says nothing
    return _truncate(text, limit)


def clean_description(raw: str, *, subject: str = "") -> str | None:
    """A description of a parameter, return value or exception from model output, or None if unusable."""
    text = one_line(raw)
    if subject:  # the model may repeat the entry's head: "x: the value" or "x (int): ..."
        text = re.sub(rf"^\*{{0,2}}{re.escape(subject.lstrip('*'))}\s*(\([^)]*\))?\s*:\s*", "", text)
    text = _first_sentence(text)
    if degenerate(text):
        return None
    text = finish(cut_repetition(text))
    if not re.search(r"[A-Za-z]{2,}", text) or code_like(text):
        return None
    return _truncate(text, 200)


def words_of(name: str) -> list[str]:
    """ "get_user_name" -> ["get", "user", "name"]; "HTTPServer" -> ["http", "server"]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    return [w.lower() for w in re.split(r"[\s_]+", spaced) if w]


def fallback_summary(kind: str, name: str, returns: bool) -> str:
    """A neutral summary built from the name, for when the model's text is unusable."""
    words = words_of(name) or [name.lower()]
    if kind == "module":
        return f"{' '.join(words).capitalize()} module."
    if kind in ("class", "type"):
        return f"{' '.join(words).capitalize()}."
    base = base_form(words[0])
    if base is not None and (base != "return" or returns):
        return finish(" ".join([base, *words[1:]]))
    return finish(("Return the " if returns else "Run ") + " ".join(words))


def fallback_description(kind: str, subject: str) -> str:
    if kind == "param":
        return finish("The " + " ".join(words_of(subject.lstrip("*")) or [subject]))
    if kind == "returns":
        return "The result."
    if kind == "yields":
        return "The next item."
    return "If the operation fails."
