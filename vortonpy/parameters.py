"""The simulation parameters of :class:`vortonpy.Sim`, as the C core defines them.

Each parameter (name, type, default, valid range, unit, meaning) is written once, in the
core's table (``csrc/params.h``); the core checks every value against it, and this module
reads it (``vortonpy._core.PARAMETERS``) for everything on the Python side: the signature
and docstring of ``Sim``, the type stubs, the scene files' and the command line's checks,
and the documentation (:func:`markdown`).

    >>> import vortonpy as vp
    >>> vp.parameters.PARAMETERS[0].name, vp.parameters.get("viscosity").unit
    ('dt', 'length^2/time')

Units are simulation units: lengths, times and masses in whatever units the scene is set up
in, used consistently; temperature is relative (the ambient fluid is 1).
"""
from __future__ import annotations

import difflib
import inspect
import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

from . import _core

__all__ = ["Parameter", "PARAMETERS", "SEED", "get", "names", "sim_keywords", "signature", "markdown",
           "numpydoc", "format_value", "suggest"]


@dataclass(frozen=True)
class Parameter:
    """One row of the parameter table.

    ``type`` is ``"float"``, ``"int"``, ``"bool"``, ``"enum"`` (one of ``choices``),
    ``"vec3"`` (three floats) or ``"profile"`` (``None`` or (height, value) pairs, ``max`` of
    them at most); ``min``/``max`` the valid range (``min`` excluded where ``min_inclusive``
    is false; a float must also be finite); ``unit`` in simulation units, ``""`` for a pure
    number; ``doc`` one line."""

    name: str
    type: str
    default: Any
    min: float
    max: float
    min_inclusive: bool
    unit: str
    choices: Tuple[str, ...]
    doc: str

    @property
    def range(self) -> str:
        """The valid values in words: ``"> 0"``, ``"[0, 1]"``, ``"'direct', 'tree', ... or 'auto'"``,
        ``"True/False"``."""
        if self.type == "bool":
            return "True/False"
        if self.type == "enum":
            return ", ".join(repr(c) for c in self.choices[:-1]) + f" or {self.choices[-1]!r}"
        if self.type == "vec3":
            return "3 finite numbers"
        if self.type == "profile":
            return (f"None or up to {int(self.max)} (height, density) pairs: heights increasing, "
                    "densities > 0")
        if math.isinf(self.max):
            return f"{'>=' if self.min_inclusive else '>'} {format_value(self.min)}"
        return f"{'[' if self.min_inclusive else '('}{format_value(self.min)}, {format_value(self.max)}]"

    @property
    def annotation(self) -> str:
        """The Python type of a value given to ``Sim``, as written in the stubs."""
        if self.name == "threads":
            return "Optional[int]"
        return {"float": "float", "int": "int", "bool": "bool", "vec3": "_Vec3", "profile": "Optional[_Profile]",
                "enum": "Literal[" + ", ".join(repr(c) for c in self.choices) + "]"}[self.type]

    @property
    def python_default(self) -> Any:
        """The default as a plain Python value (a vector as a tuple)."""
        if self.type == "vec3":
            return tuple(float(x) for x in self.default)
        return self.default

    def describe(self) -> str:
        """``doc [unit]``: one line."""
        return f"{self.doc} [{self.unit}]" if self.unit else self.doc


def format_value(v: Any) -> str:
    """A value as short text: ``0.0333333``, ``1e-04``, ``(0, 0, -10)``, ``'auto'``, a profile as
    ``((-0.05, 1.6), (0.05, 0.4))``."""
    if hasattr(v, "tolist"):  # a NumPy array or scalar: its plain Python value
        v = v.tolist()
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, float):
        return f"{v:.6g}" if not math.isinf(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(format_value(x if isinstance(x, (tuple, list)) else float(x)) for x in v) + ")"
    return repr(v)


#: Every parameter, in the table's order (the documented API's first).
PARAMETERS: Tuple[Parameter, ...] = tuple(
    Parameter(**{**d, "choices": tuple(d["choices"])}) for d in _core.PARAMETERS)

#: ``Sim(seed=...)``: seeds the emitters' random numbers; given at construction only, and
#: not a parameter of the running simulation.
SEED = Parameter(name="seed", type="int", default=_core.DEFAULT_SEED, min=0.0, max=float(2 ** 64 - 1),
                 min_inclusive=True, unit="", choices=(),
                 doc="seed of the emitters' random numbers (construction only)")

_BY_NAME: Dict[str, Parameter] = {p.name: p for p in PARAMETERS}


def get(name: str) -> Parameter:
    """The parameter called ``name``; ``KeyError`` naming the nearest one if there is none."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no Sim parameter {name!r}{suggest(name, names())}") from None


def names() -> Tuple[str, ...]:
    """The parameters' names, in the table's order."""
    return tuple(_BY_NAME)


def sim_keywords() -> Tuple[str, ...]:
    """Every keyword ``Sim()`` accepts: the parameters and ``seed``."""
    return names() + (SEED.name,)


def suggest(word: str, candidates: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the candidate closest to ``word`` (difflib), or ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def signature() -> inspect.Signature:
    """The signature of ``Sim(...)``: every parameter keyword-only, with its default."""
    ann = {"float": float, "int": int, "bool": bool, "enum": str, "vec3": Sequence[float],
           "profile": Optional[Sequence[Tuple[float, float]]]}
    params = [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.python_default,
                                annotation=Optional[int] if p.name == "threads" else ann[p.type])
              for p in PARAMETERS + (SEED,)]
    return inspect.Signature(params)


def numpydoc(items: Sequence[Parameter] = PARAMETERS + (SEED,)) -> str:
    """A numpydoc "Parameters" section for ``items``."""
    kind = {"float": "float", "int": "int", "bool": "bool", "enum": "str", "vec3": "(3,) array-like",
            "profile": "(N, 2) array-like or None"}
    lines = ["Parameters", "----------"]
    for p in items:
        unit = f" [{p.unit}]" if p.unit else ""
        rng = "" if p.type in ("bool", "vec3", "profile") or p is SEED else f", {p.range}"
        lines.append(f"{p.name} : {kind[p.type]}, default {format_value(p.python_default)}{unit}{rng}")
        lines.append(f"    {p.doc[0].upper()}{p.doc[1:]}.")
    return "\n".join(lines)


def markdown(items: Sequence[Parameter] = PARAMETERS + (SEED,)) -> str:
    """The parameters as a Markdown table (name, default, unit, valid values, meaning), for
    the documentation."""
    rows = ["| Parameter | Default | Unit | Valid values | Meaning |", "|---|---|---|---|---|"]
    for p in items:
        rng = "any integer >= 0" if p is SEED else p.range
        doc = p.doc.replace("|", "\\|")
        rows.append(f"| `{p.name}` | `{format_value(p.python_default)}` | {p.unit or '-'} | {rng} | {doc} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m vortonpy.parameters: the table in Markdown
    print(markdown(), end="")
