"""Tool registry: each tool has a name, a description, a JSON schema for its arguments and a function over a
``ToolContext``. ``ToolRegistry.call`` validates the arguments against the schema, runs the tool, and returns an
``Observation``: errors (unknown tool, bad arguments, a failure inside the tool) come back as observations with
``ok = False``, never as exceptions that end the episode. Every call records its latency.

``failure_kind`` classifies a failed call from its error text (one rule for the loop's counters and the reward's
legality check): an unknown tool, invalid arguments and a crash (the tool raised something other than ``ToolError``)
are illegal calls; a ``ToolError`` (the tool's own "cannot answer") is a legal call that failed.

The schema subset understood (enough for the tool library, no dependency): ``type`` object / array / number / integer /
string / boolean, ``properties``, ``required``, ``additionalProperties: false``, ``items``, ``minItems``, ``maxItems``,
``enum``, ``minimum``, ``maximum``, ``oneOf`` (exactly one sub-schema matches).
"""
from __future__ import annotations

import dataclasses
import json
import re
import time
from typing import Any, Callable

from jaxdrive.errors import UserInputError
from jaxdrive.json_values import is_finite_number


class ToolError(Exception):
    """A tool's own "cannot answer" (unknown object id, nothing at that box...): becomes an error observation."""


# error prefixes of the illegal calls (``ToolRegistry.call`` writes them; ``failure_kind`` reads them)
ILLEGAL_PREFIXES = {"unknown tool": "unknown_tool", "invalid arguments": "invalid_args", "tool crashed": "tool_crash"}
# how trajectory files written before the "tool crashed" prefix recorded a crash: "NAME failed: ExceptionType: message"
# (a ToolError was, and is, "NAME: message"), so re-scoring such a file still counts its crashes as illegal calls
LEGACY_CRASH = re.compile(r"[A-Za-z_]\w* failed: [A-Za-z_][\w.]*: ")


def failure_kind(error: str) -> str:
    """The kind of a failed call from its observation's error: ``unknown_tool``, ``invalid_args``, ``tool_crash``
    (the illegal calls) or ``tool_error`` (a ``ToolError``: the tool ran and could not answer)."""
    if LEGACY_CRASH.match(error):
        return "tool_crash"
    return next((kind for prefix, kind in ILLEGAL_PREFIXES.items() if error.startswith(prefix)), "tool_error")


def is_legal(ok: bool, error: str | None) -> bool:
    """Whether a call passed the legality check: a known tool, valid arguments, and a run that returned (a result or
    the tool's own "cannot answer"); trajectory steps carry ``ok`` and ``error``."""
    return ok or failure_kind(str(error or "")) == "tool_error"


@dataclasses.dataclass
class Observation:
    tool: str
    ok: bool
    result: Any = None
    error: str | None = None
    latency_ms: float = 0.0

    def text(self) -> str:
        """Compact JSON the policy reads."""
        return json.dumps({"result": self.result} if self.ok else {"error": self.error}, separators=(",", ":"))


@dataclasses.dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict  # JSON schema of the arguments object
    fn: Callable[..., Any]  # fn(ctx, **arguments) -> JSON-serialisable result

    def spec(self) -> dict:
        """OpenAI-style function spec (what the prompt lists)."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


def validate(value: Any, schema: dict, path: str = "arguments") -> Any:
    """``value`` checked against ``schema``; ``ValueError`` naming the path of the first value that does not match.

    Returns the value with every ``integer`` as a Python int: as in JSON Schema, a number with a zero fractional
    part (``1.0``, which models write) is an integer."""
    if "oneOf" in schema:
        matches = []
        for sub in schema["oneOf"]:
            try:
                matches.append(validate(value, sub, path))
            except ValueError:
                pass
        if len(matches) != 1:
            raise UserInputError(f"{path}: expected exactly one of {json.dumps(schema['oneOf'])}, got {json.dumps(value)}")
        return matches[0]
    t = schema.get("type")
    checks = {"object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
              "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
              "integer": lambda v: is_finite_number(v) and float(v).is_integer(), "number": is_finite_number}
    if t is not None and not checks[t](value):
        raise UserInputError(f"{path}: expected {t}, got {json.dumps(value)}")
    if t == "integer":
        value = int(value)
    if "enum" in schema and value not in schema["enum"]:
        raise UserInputError(f"{path}: expected one of {schema['enum']}, got {json.dumps(value)}")
    if "minimum" in schema and value < schema["minimum"]:
        raise UserInputError(f"{path}: expected >= {schema['minimum']}, got {value}")
    if "maximum" in schema and value > schema["maximum"]:
        raise UserInputError(f"{path}: expected <= {schema['maximum']}, got {value}")
    if t == "object":
        props = schema.get("properties", {})
        for r in schema.get("required", []):
            if r not in value:
                raise UserInputError(f"{path}: missing required field {r!r}")
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(props))
            if extra:
                raise UserInputError(f"{path}: unknown field(s) {extra} (allowed: {sorted(props)})")
        value = {k: validate(v, props[k], f"{path}.{k}") if k in props else v for k, v in value.items()}
    if t == "array":
        if len(value) < schema.get("minItems", 0):
            raise UserInputError(f"{path}: expected at least {schema['minItems']} items, got {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise UserInputError(f"{path}: expected at most {schema['maxItems']} items, got {len(value)}")
        if "items" in schema:
            value = [validate(v, schema["items"], f"{path}[{i}]") for i, v in enumerate(value)]
    return value


class ToolRegistry:
    """Name -> ``Tool``; ``call`` turns every failure into an error ``Observation``."""

    def __init__(self, tools: list[Tool]):
        self.tools = {t.name: t for t in tools}
        if len(self.tools) != len(tools):
            raise UserInputError("tools: names must be unique")

    def names(self) -> list[str]:
        return list(self.tools)

    def specs(self) -> list[dict]:
        return [t.spec() for t in self.tools.values()]

    def call(self, ctx, name: str, arguments: Any) -> Observation:
        t0 = time.perf_counter()

        def done(**kw) -> Observation:
            return Observation(tool=name, latency_ms=(time.perf_counter() - t0) * 1e3, **kw)

        tool = self.tools.get(name)
        if tool is None:
            return done(ok=False, error=f"unknown tool {name!r} (available: {', '.join(self.tools)})")
        try:
            arguments = validate(arguments, tool.parameters)
        except ValueError as e:
            return done(ok=False, error=f"invalid arguments for {name}: {e}")
        try:
            result = tool.fn(ctx, **arguments)
        except ToolError as e:
            return done(ok=False, error=f"{name}: {e}")
        except Exception as e:  # noqa: BLE001 - a broken tool must not end the episode; the error is the observation
            return done(ok=False, error=f"tool crashed: {name}: {type(e).__name__}: {e}")
        return done(ok=True, result=result)
