"""The one monitor of docstring text: clean the model's text for a slot, then refuse it when it contradicts the code.

`judge` turns raw model output for one slot into a sentence (infill.docstrings.text: one line, capitalised,
imperative, no quote runs) and checks it against what the code says (infill.docstrings.facts). It refuses:

- text it cannot clean (empty, a loop, copied code as a description);
- code instead of a sentence: `def ...`, `(self)`, a call, an operator, an identifier soup;
- a summary that says "Return ..." for a function that returns nothing, or "Yield ..." for one that is not a
  generator, and a summary that says a function which does something does nothing;
- a value described as a parameter that no return statement uses ("Return the path." when `path` is never
  returned), in the summary or the Returns entry;
- a Raises entry whose text names another exception, or reads like a return value;
- a summary whose subject is another object: a sibling function's name or verb ("Pop the item." on `push`),
  a module or class summary naming one of its definitions or starting with one of its methods' verbs, and a
  class summary in the imperative whose verb no method of the class has ("Replace the given item." on Stack);
- a parameter described with another parameter's name ("default: The path.").

The same verdict is used twice: inside decoding (`SlotMonitor`, given to infill.api.fill_text, which ranks a
refused candidate after the others and, when sampling, draws another, as it does for code fills its static
monitor refuses), and on the text decoding returns, where a refused slot falls back to the names-only sentence.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infill.docstrings import text
from infill.docstrings.facts import Facts
from infill.docstrings.skeleton import Skeleton, Slot

if TYPE_CHECKING:
    from infill.api import Edit

BUILTIN_EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}
_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Warning|Exit|Interrupt|Iteration))\b")
_BACKTICKED = re.compile(r"`+[^`]*`+")
_CALL = re.compile(r"[A-Za-z_]\w*\((?!e?s\))")  # `f(`, not the plural "file(s)"
_OPERATOR = re.compile(r"\s(=|==|!=|->|\+=|:=|<=|>=)\s|==|->|\*\*\w|\w\[|\b(self|cls)(\.\w|[,)])|\(self\b")
_KEYWORD = re.compile(  # a statement: not "Class for ...", "Import string error."
    r"^(def\s+\w+\s*\(|class\s+\w+\s*[(:]|lambda\b[^:]*:|from\s+\S+\s+import\s|\w+\s*=\s)"
    r"|^import\s+[\w.]+(\s+as\s+\w+)?(\s*,\s*[\w.]+)*\.?$"
)
_PROSE_WORD = re.compile(r"^[A-Za-z][a-z]*[.,;:]?$")
_NOTHING = re.compile(
    r"^(do nothing|does nothing|pass(es)?|no-?op|nothing|(this|it) (function |method )?does nothing"
    r"|(a |an )?(placeholder|stub)|not (yet )?implemented)\b",
    re.IGNORECASE,
)
_RETURNS = re.compile(r"^returns?\b|\band returns?\b", re.IGNORECASE)
ROLES = {  # verbs that say what a class is for ("Store timedelta objects.") rather than one thing it does
    "create", "initialize", "initialise", "construct", "build", "make", "represent", "define", "wrap", "provide",
    "store", "hold", "manage", "implement", "handle", "describe", "encapsulate", "track", "contain", "keep", "model",
    "mark", "mix", "add", "support", "allow", "enable", "extend", "override", "customize",
}  # fmt: skip
DETERMINERS = {"the", "a", "an", "this", "that", "given", "new", "input", "optional", "current", "specified", "its"}


@dataclass(frozen=True)
class Verdict:
    """The cleaned sentence for a slot, or why there is none."""

    text: str | None
    reason: str | None = None


def _identifier(word: str) -> bool:
    """A word that is code: snake_case, dotted.name or camelCase (a CamelCase name reads as a proper noun)."""
    word = word.strip(".,;:!?\"'()")
    if not word:
        return False
    if "_" in word.strip("_") or "__" in word:
        return True
    if re.search(r"[a-z]\.[A-Za-z_]", word):
        return True
    return bool(re.match(r"[a-z]+[A-Z]", word))


def is_code(sentence: str) -> str | None:
    """Why `sentence` is code rather than prose (backticked references like `item` are prose), or None."""
    prose = _BACKTICKED.sub("X", sentence)
    if _KEYWORD.search(prose.lower()):
        return "is code, not a sentence"
    words = prose.split()
    plain = sum(bool(_PROSE_WORD.match(w)) for w in words)
    mostly_prose = plain >= 6 and 3 * plain >= 2 * len(words)  # a call or `<=` in passing is a reference
    if _CALL.search(prose) and not mostly_prose:
        return "is code (a call), not a sentence"
    if _OPERATOR.search(prose) and not mostly_prose:
        return "is code, not a sentence"
    code = sum(_identifier(w) for w in words)
    if code and code * 2 >= len(words):
        return "is a list of identifiers, not a sentence"
    return None


def _tokens(sentence: str) -> list[str]:
    """Lower-case word tokens, identifiers kept whole ("the `token_ids_1` list" -> the, token_ids_1, list)."""
    return [t.lower() for t in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", sentence)]


def _head(tokens: list[str], skip_verb: bool) -> list[str]:
    """The words after the verb (when `skip_verb`) and any determiners: the subject or object of a sentence."""
    rest = tokens[1:] if skip_verb else tokens
    while rest and rest[0] in DETERMINERS:
        rest = rest[1:]
    return rest


def _names(name: str) -> list[tuple[str, ...]]:
    """The ways a sentence may write a name: as the identifier, and as its words ("read_config", "read config")."""
    forms: list[tuple[str, ...]] = [(name.lower(),)]
    split = tuple(text.words_of(name))
    if split and split != forms[0]:
        forms.append(split)
    return forms


def _starts_with(tokens: list[str], name: str) -> bool:
    return any(tuple(tokens[: len(form)]) == form for form in _names(name))


def _mentions(tokens: list[str], name: str) -> bool:
    return any(tuple(tokens[i : i + len(form)]) == form for form in _names(name) for i in range(len(tokens)))


def _other_parameter(tokens: list[str], facts: Facts, own: str | None, skip_verb: bool) -> str | None:
    """A parameter (other than `own`) that the sentence's subject or object names, when `own` is not named."""
    head = _head(tokens, skip_verb)
    if own is not None and _mentions(tokens, own):
        return None
    return next((p for p in facts.params if p != own and _starts_with(head, p)), None)


def _returns_unreturned_parameter(tokens: list[str], facts: Facts, skip_verb: bool) -> str | None:
    if facts.returned is None:
        return None
    head = _head(tokens, skip_verb)
    return next(
        (p for p in facts.params if _starts_with(head, p) and not any(n.lower() == p.lower() for n in facts.returned)),
        None,
    )


def _other_object(tokens: list[str], facts: Facts) -> str | None:
    """A sibling or member that a summary names as its subject (or, for a function, as its verb)."""
    own = set(text.words_of(facts.name))
    if facts.is_function:
        verb = tokens[0] if tokens else ""
        for other in sorted(facts.others):
            other_words = text.words_of(other)
            if not other_words or other.startswith("_"):
                continue
            if other_words[0] == verb and verb not in own and text.base_form(verb) is not None:
                return other
            if _starts_with(_head(tokens, True), other) and not _starts_with(_head(tokens, True), facts.name):
                return other
        return None
    head = _head(tokens, False)
    for other in sorted(facts.members | facts.others):
        words = text.words_of(other)
        same = other.lower().replace("_", "") == facts.name.lower().replace("_", "")
        if other.startswith("_") or not words or same or set(words) <= own:  # `install` in PipInstall is its own
            continue
        if _starts_with(head, other):
            return other
        if facts.kind == "class" and head[:1] == words[:1] and text.base_form(words[0]) is not None:
            return other
    return None


def _returns_nothing(facts: Facts) -> bool:
    """A module, or a class that is not called like a function (no `__call__` or `__new__`)."""
    return not ({"__call__", "__new__"} & facts.members)


def _unbacked_action(first: str, facts: Facts) -> bool:
    """A class summary in the imperative ("Replace the given item.") whose verb is neither in the class's name
    nor in one of its methods' names, nor one of the verbs that say what a class is for (ROLES)."""
    if text.base_form(first) != first or first in ROLES or first in text.words_of(facts.name):
        return False
    return not any(first in text.words_of(member) for member in facts.members)


def contradiction(slot: Slot, sentence: str, facts: Facts) -> str | None:
    """Why a cleaned sentence for `slot` contradicts the code, or None."""
    code = is_code(sentence)
    if code is not None:
        return code
    tokens = _tokens(sentence)
    first = tokens[0] if tokens else ""
    if slot.kind == "summary":
        if facts.is_function and not facts.is_property:
            if facts.returns_value is False and _RETURNS.search(sentence):
                return "says it returns a value; the function returns nothing"
            if first in ("yield", "yields") and facts.returns_value is not None and not facts.generator:
                return "says it yields; the function is not a generator"
            if _NOTHING.search(sentence) and not facts.stub:
                return "says it does nothing; the function does something"
            if first in ("return", "returns"):
                param = _returns_unreturned_parameter(tokens, facts, skip_verb=True)
                if param is not None:
                    return f"says it returns `{param}`, which no return statement uses"
        elif not facts.is_function and first in ("return", "returns", "yield", "yields") and _returns_nothing(facts):
            if not _starts_with(tokens, facts.name):  # "Return finder." names ReturnFinder
                return f"says it returns a value; a {facts.kind} does not"
        elif facts.kind == "class" and _unbacked_action(first, facts):
            return f"says it does what no method of `{facts.name}` does ({first})"
        other = _other_object(tokens, facts)
        if other is not None:
            return f"is about `{other}`, not `{facts.name}`"
    elif slot.kind == "param":
        other = _other_parameter(tokens, facts, slot.subject.lstrip("*"), skip_verb=False)
        if other is not None:
            return f"describes `{slot.subject}` with another parameter's name (`{other}`)"
    elif slot.kind == "returns":
        param = _returns_unreturned_parameter(tokens, facts, skip_verb=False)
        if param is not None:
            return f"says the value is `{param}`, which no return statement uses"
    elif slot.kind == "raises":
        own = slot.subject.rsplit(".", 1)[-1]
        prose = _BACKTICKED.sub("X", sentence)  # `not isinstance(x, Warning)` quotes the code, names nothing
        named = [m for m in _EXCEPTION.findall(prose) if m != own]
        named += [w for w in re.findall(r"\b[A-Z]\w+\b", prose) if w in BUILTIN_EXCEPTIONS and w != own]
        if named:
            return f"names {named[0]}, not {own}"
        if first in ("return", "returns"):
            return f"describes a return value, not when {own} is raised"
    return None


def judge(slot: Slot, raw: str, facts: Facts, limit: int) -> Verdict:
    """The model's raw text for `slot`, cleaned, or the reason it is refused."""
    if slot.kind == "summary":
        is_function = facts.is_function and not facts.is_property
        cleaned = text.clean_summary(raw, name=facts.name, is_function=is_function, limit=limit)
    else:
        cleaned = text.clean_description(raw, subject=slot.subject)
    if cleaned is None:
        return Verdict(None, "no usable sentence")
    reason = contradiction(slot, cleaned, facts)
    return Verdict(None, reason) if reason is not None else Verdict(cleaned)


def judge_all(skeleton: Skeleton, facts: Facts, raw: Mapping[str, str], limit: int) -> dict[str, Verdict]:
    """A verdict for every slot of `skeleton` (a slot the model wrote nothing for is refused)."""
    return {slot.key: judge(slot, raw.get(slot.key, ""), facts, limit) for slot in skeleton.slots()}


@dataclass(frozen=True)
class SlotMonitor:
    """The monitor as infill.api.fill_text takes it (infill.core.monitor.Monitor): a candidate's edits, by the
    start byte of the slot each fills, judged; the first refused slot and why, or None."""

    slots: Mapping[int, Slot]
    facts: Facts
    limit: int

    def rejection(self, patched: bytes, edits: Sequence[Edit]) -> str | None:
        for edit in edits:
            slot = self.slots.get(edit.start_byte)
            if slot is None:
                continue
            verdict = judge(slot, edit.text, self.facts, self.limit)
            if verdict.text is None:
                return f"{slot.key}: {verdict.reason}"
        return None
