"""Sentences built from the names and the code alone: deterministic, no model, true by construction.

`push(item)` on `Stack` gives "Push `item` onto the stack."; `is_empty()` on `Stack` gives "Return whether the
stack is empty."; `read_config(path)` gives "Read the config."; a ValueError raised under `if size < 0:` gives
"If `size < 0`.". What cannot be said from the names is left to the neutral text of infill.docstrings.text.
Each sentence is written to pass the monitor (infill.docstrings.monitor): it says "Return" only for a function
that returns a value, and it names no other definition.
"""

from __future__ import annotations

from infill.docstrings import text
from infill.docstrings.facts import Facts
from infill.docstrings.skeleton import Slot

PREDICATES = {
    "is", "are", "was", "were", "has", "have", "can", "could", "should", "must", "needs", "does", "uses",
    "allows", "supports", "contains", "matches", "exists", "equals", "wants", "accepts", "requires",
}  # fmt: skip
PREPOSITION = {
    "push": "onto",
    **dict.fromkeys(("add", "append", "insert", "put", "register", "attach", "write", "send", "save", "store",
                     "emit", "assign", "upload", "extend"), "to"),
    **dict.fromkeys(("pop", "remove", "delete", "discard", "extract", "take", "read", "load", "fetch",
                     "retrieve", "receive", "download", "unregister", "detach", "drop", "clear"), "from"),
}  # fmt: skip
OBJECT_PREPOSITION = {"wait": "for", "listen": "for", "iterate": "over", "subscribe": "to", "respond": "to"}
NO_ARTICLE = {
    "all", "each", "every", "any", "some", "no", "one", "many", "more", "most", "both", "from", "to", "for",
    "by", "with", "into", "in", "on", "at", "if", "as", "and", "or", "of", "over", "until", "after", "before",
    "when", "via", "per",
}  # fmt: skip


def _phrase(words: list[str]) -> str:
    """ "the config", "all supported aspect ratios", "from file": an article only before a plain noun."""
    return " ".join(words) if words[0] in NO_ARTICLE else "the " + " ".join(words)


def _owner(facts: Facts) -> str | None:
    """ "the stack" for a method of Stack (None for a function)."""
    if facts.kind != "method" or not facts.owner:
        return None
    return "the " + " ".join(text.words_of(facts.owner) or [facts.owner.lower()])


def _subject(facts: Facts) -> str | None:
    """What a predicate is about: the object a method belongs to, else the first parameter."""
    owner = _owner(facts)
    if owner is not None:
        return owner
    return f"`{facts.objects[0]}`" if facts.objects else None


def summary(facts: Facts) -> str:
    """The summary line for a definition, from its names."""
    words = text.words_of(facts.name.strip("_")) or [facts.name.lower()]
    if not facts.is_function:
        return text.fallback_summary(facts.kind, facts.name, False)
    if words[0] == "do" and len(words) > 1:  # `do_stop`, a command handler, stops
        words = words[1:]
    returns = facts.returns_value is not False
    if words[0] in PREDICATES and len(words) > 1 and returns:
        subject = _subject(facts)
        claim = " ".join(words)
        return text.finish(f"Return whether {subject} {claim}" if subject else f"Return whether {claim}")
    if words[0] in ("to", "as") and len(words) > 1 and returns:
        owner = _owner(facts)
        if owner is not None:
            return text.finish(f"Return {owner} as {' '.join(words[1:])}")
        if facts.objects:
            return text.finish(f"Convert `{facts.objects[0]}` to {' '.join(words[1:])}")
    if words[0] == "from" and len(words) > 1 and returns and _owner(facts) is not None:  # an alternate constructor
        return text.finish(f"Return {_owner(facts)} from {' '.join(words[1:])}")
    verb = text.base_form(words[0])
    if verb is None and returns and "to" in words[1:-1]:  # `chars_to_html`
        cut = words.index("to", 1)
        return text.finish(f"Convert {_phrase(words[:cut])} to {' '.join(words[cut + 1 :])}")
    if verb is not None and (verb != "return" or returns):
        rest = words[1:]
        owner = _owner(facts)
        linked = f"{verb} {OBJECT_PREPOSITION[verb]}" if verb in OBJECT_PREPOSITION else verb
        if rest:
            return text.finish(f"{linked} {_phrase(rest)}")
        preposition = PREPOSITION.get(verb)
        if facts.objects:
            where = f" {preposition} {owner}" if owner and preposition else ""
            return text.finish(f"{linked} `{facts.objects[0]}`{where}")
        if owner is not None:
            return text.finish(f"{verb} {preposition} {owner}" if preposition else f"{verb} {owner}")
    return text.fallback_summary(facts.kind, facts.name, returns)


def description(slot: Slot, facts: Facts) -> str:
    """The text of a parameter, Returns, Yields or Raises entry, from the names and the code."""
    if slot.kind == "raises":
        condition = facts.conditions.get(slot.subject)
        if condition is not None and "`" not in condition:
            return f"If `{condition}`."
    return text.fallback_description(slot.kind, slot.subject)


def texts(facts: Facts, slots: list[Slot]) -> dict[str, str]:
    """Names-only text for every slot, by key."""
    return {s.key: summary(facts) if s.kind == "summary" else description(s, facts) for s in slots}
