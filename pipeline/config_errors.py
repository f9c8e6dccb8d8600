"""Config validation errors as people read them: one line per problem, with the YAML
line it comes from, the dotted key, and for an unknown key the closest valid one and
the full list, e.g.

    line 37, tokenize.shard: unknown key; did you mean 'shards'? (valid keys: append_eos, ...)
"""

from __future__ import annotations

import difflib
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError


def describe_problems(error: ValidationError, text: str, overrides: list[str], root: type[BaseModel],
                      source_types: tuple[type[BaseModel], ...]) -> str:
    """Every problem of ``error`` (validating ``root`` from the YAML ``text``), one per line.
    ``source_types``: the members of the download sources' tagged union."""
    lines = _key_lines(text)
    tags = {get_args(option.model_fields["type"].annotation)[0] for option in source_types}
    return "\n".join(_describe(item, lines, overrides, root, source_types, tags) for item in error.errors())


def _describe(item: dict, lines: dict[tuple, int], overrides: list[str], root: type[BaseModel],
              source_types: tuple, tags: set[str]) -> str:
    loc = tuple(part for part in item["loc"] if isinstance(part, (str, int)))
    key_path = _strip_union_tags(loc, tags)
    dotted = ".".join(str(part) for part in key_path) or "(top level)"
    line = _nearest_line(key_path, lines)
    where = f"line {line}, " if line else ""
    if any(o.split("=", 1)[0].strip() == dotted for o in overrides):
        where = "from --set, "
    if len(dotted) > QUOTED_CHARS:  # a key too can be a wall of text
        dotted = quoted(dotted)
    if item["type"] == "extra_forbidden":
        valid = _valid_keys(key_path[:-1], root, source_types)
        hint = difflib.get_close_matches(str(key_path[-1]), valid, n=1)
        suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
        listing = f" (valid keys: {', '.join(valid)})" if valid else ""
        return f"  {where}{dotted}: unknown key{suggestion}{listing}"
    if item["type"] == "missing":
        return f"  {where}{dotted}: required key is missing"
    value = item.get("input")
    # A section's own check (a rule across its keys) gets the whole section as its
    # input: its message names the keys, and echoing the mapping would bury it.
    got = "" if isinstance(value, dict) else f" (got {quoted(value)})"
    return f"  {where}{dotted}: {item['msg']}{got}"


# How much of a value an error quotes: enough to recognize it, never a wall of text
# (a 120,000-character --set value was printed whole, and a 10 MB one took 14 s).
QUOTED_CHARS = 80


def quoted(value: Any) -> str:
    """``repr(value)``, cut to about ``QUOTED_CHARS`` characters with the length said
    when longer: ``'xxxxxxxx...' (120,000 characters)``."""
    if isinstance(value, (str, bytes)) and len(value) > QUOTED_CHARS:
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:QUOTED_CHARS]!r}... ({len(value):,} {unit})"
    text = repr(value)
    return text if len(text) <= QUOTED_CHARS else f"{text[:QUOTED_CHARS]}... ({len(text):,} characters as written)"


def _strip_union_tags(loc: tuple, tags: set[str]) -> tuple:
    """pydantic puts the discriminator tag ('files', 'tsv', ...) in the error location."""
    out = []
    for index, part in enumerate(loc):
        if part in tags and index > 0 and loc[index - 1] in ("train", "valid", "test"):
            continue
        out.append(part)
    return tuple(out)


def _valid_keys(section_path: tuple, root: type[BaseModel], source_types: tuple) -> list[str]:
    """The keys the model at ``section_path`` accepts (for sources: any source type's)."""
    if section_path[-2:-1] == ("download",) and section_path[-1] in ("train", "valid", "test"):
        keys: set[str] = set()
        for option in source_types:
            keys |= set(option.model_fields)
        return sorted(keys)
    model: Any = root
    for part in section_path:
        field = getattr(model, "model_fields", {}).get(part) if isinstance(part, str) else None
        if field is None:
            return []
        # Optional[Model] and similar unions: take the pydantic model inside.
        model = next((a for a in getattr(field.annotation, "__args__", ()) if hasattr(a, "model_fields")),
                     field.annotation)
    return sorted(getattr(model, "model_fields", {}))


def _key_lines(text: str) -> dict[tuple, int]:
    """Map each key path in the YAML text to its 1-based line number."""
    lines: dict[tuple, int] = {}

    def walk(node: yaml.Node, prefix: tuple) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                path = prefix + (key_node.value,)
                lines[path] = key_node.start_mark.line + 1
                walk(value_node, path)
        elif isinstance(node, yaml.SequenceNode):
            for index, child in enumerate(node.value):
                lines[prefix + (index,)] = child.start_mark.line + 1
                walk(child, prefix + (index,))

    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return lines
    if root is not None:
        walk(root, ())
    return lines


def _nearest_line(key_path: tuple, lines: dict[tuple, int]) -> int | None:
    for end in range(len(key_path), 0, -1):
        if key_path[:end] in lines:
            return lines[key_path[:end]]
    return None

