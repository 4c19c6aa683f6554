"""LLM prices, and the ``cost_usd`` of a call from its model and token counts.

The packaged table (``pricing.toml`` beside this module) lists US dollars per million input and output
tokens for current OpenAI and Anthropic models, with the date the prices were read (``as_of``). A user file
in the same layout, named by the ``TAILCUT_PRICING`` environment variable (or passed to
:func:`load_pricing`), replaces or adds entries model by model. Layout::

    as_of = "2025-11-30"
    [models."gpt-4o"]
    input = 2.50     # USD per 1M input tokens
    output = 10.00   # USD per 1M output tokens

A model name matches an entry exactly, else the longest entry it starts with followed by ``-`` (a dated
snapshot ``gpt-4o-2024-08-06`` takes ``gpt-4o``'s price, ``gpt-4o-mini`` its own), after dropping a
``provider/`` prefix. A model that matches nothing, or a call with no model, has no cost: ``None``,
never zero. Missing token counts count as 0 (as in the ``input_tokens`` sums of the ``traces`` table).
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Final

from tailcut import environment
from tailcut.errors import ConfigError

#: Environment variable naming a user pricing file merged over the packaged one.
PRICING_ENV: Final = environment.TAILCUT_PRICING
_DEFAULT: Final = Path(__file__).with_name("pricing.toml")
_PER_TOKEN: Final = 1e-6
_MAX_MATCHES: Final = 4096


@dataclass(frozen=True)
class Pricing:
    """Prices per model: ``(input, output)`` USD per million tokens, and the date they were read."""

    models: Mapping[str, tuple[float, float]]
    as_of: str | None = None
    _matches: dict[str, tuple[float, float] | None] = field(default_factory=dict, compare=False, repr=False)

    def price(self, model: str | None) -> tuple[float, float] | None:
        """``(input, output)`` USD per million tokens of ``model`` (see the module docstring), or None."""
        if not model:
            return None
        matches = self._matches
        if model not in matches:
            if len(matches) >= _MAX_MATCHES:  # bounded: names come from the traffic
                matches.clear()
            matches[model] = self._match(model)
        return matches[model]

    def _match(self, model: str) -> tuple[float, float] | None:
        name = model.rsplit("/", 1)[-1].strip().lower()
        found = self.models.get(name)
        if found is not None:
            return found
        prefixes = [m for m in self.models if name.startswith(m + "-")]
        return self.models[max(prefixes, key=len)] if prefixes else None

    def cost(self, model: str | None, input_tokens: int | None, output_tokens: int | None) -> float | None:
        """USD of one call, or None when ``model`` has no price."""
        found = self.price(model)
        if found is None:
            return None
        return ((input_tokens or 0) * found[0] + (output_tokens or 0) * found[1]) * _PER_TOKEN


def _price(model: str, entry: Any, source: Path) -> tuple[float, float]:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{source}: models.{model!r} must be a table with input and output prices")
    prices = []
    for side in ("input", "output"):
        value = entry.get(side)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise ConfigError(
                f"{source}: models.{model!r}.{side} must be a non-negative number, got {value!r}"
            )
        prices.append(float(value))
    return prices[0], prices[1]


def _read(path: Path) -> tuple[dict[str, tuple[float, float]], str | None]:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the pricing file {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not a valid TOML pricing file: {exc}") from None
    models = document.get("models", {})
    if not isinstance(models, Mapping):
        raise ConfigError(f"{path}: 'models' must be a table of models")
    as_of = document.get("as_of")
    return {str(m).strip().lower(): _price(m, e, path) for m, e in models.items()}, (
        str(as_of) if as_of is not None else None
    )


def load_pricing(path: str | os.PathLike[str] | None = None) -> Pricing:
    """The packaged prices, with the entries of ``path`` (a user pricing file) replacing or adding to them.

    Raises
    ------
    ConfigError
        If a file cannot be read, is not TOML, or holds a price that is not a non-negative number.
    """
    models, as_of = _read(_DEFAULT)
    if path is not None:
        extra, user_as_of = _read(Path(path))
        models.update(extra)
        as_of = user_as_of or as_of
    return Pricing(models, as_of)


@cache
def _cached(path: str | None) -> Pricing:
    return load_pricing(path)


def default_pricing() -> Pricing:
    """The prices the writers and the collector use: packaged, plus ``$TAILCUT_PRICING`` when set."""
    return _cached(environment.pricing_file())
