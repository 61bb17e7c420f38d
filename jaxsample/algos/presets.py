"""Tuned settings per environment, as data: ``presets.toml`` in this package.

``jaxsample train --env NAME --algo ALGO`` starts from the preset tuned for
``NAME`` and ``ALGO`` where there is one (`for_env`: at most one per env and
algorithm; PPO's is named after its env, another algorithm's
``"<env>/<algo>"``, e.g. ``CartPole-v1/pqn``); ``--preset none`` gives the
algorithm's plain config defaults, ``--preset NAME`` another preset. Each
entry names its source (gymnax-blines' PPO files for gymnax's envs,
purejaxql's for PQN, this project's own measured settings for the suites) and how
the source's settings became config fields. A preset is data only: the same
trainer runs it (no code path of its own). Imports no JAX.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

__all__ = ["PRESETS_FILE", "Preset", "for_env", "get", "names", "presets"]

#: The data file, in this package (declared as package data).
PRESETS_FILE = "presets.toml"
_KEYS = {"env", "algo", "source", "mapping", "config"}


@dataclasses.dataclass(frozen=True)
class Preset:
    """One entry of ``presets.toml``.

    Attributes:
      name: the preset's name (its env's, for the env presets).
      env: the env it is tuned for (and chosen by, `for_env`).
      algo: the ``--algo`` it is for (``"ppo"``).
      source: where its values come from.
      mapping: how the source's settings became config fields.
      values: config fields (the others keep their defaults).
    """

    name: str
    env: str
    algo: str
    source: str
    mapping: str
    values: dict[str, Any]

    def config(self, **overrides: Any) -> Any:
        """The preset as its algorithm's config (a
        [`PPOConfig`][jaxsample.algos.configs.PPOConfig] for ``ppo``) for its
        env (``overrides`` on top)."""
        from jaxsample.algos import registry

        config_type = registry.get(self.algo).config_type
        return config_type(**{"env_name": self.env, **self.values, **overrides})


@functools.cache
def presets() -> dict[str, Preset]:
    """Every preset of ``presets.toml``, by name, in the file's order."""
    import importlib.resources
    import tomllib

    text = importlib.resources.files("jaxsample.algos").joinpath(PRESETS_FILE).read_text()
    out = {}
    for name, entry in tomllib.loads(text).items():
        if set(entry) != _KEYS:
            raise ValueError(f"{PRESETS_FILE} [{name}]: keys {sorted(entry)}, want {sorted(_KEYS)}")
        out[name] = Preset(name=name, values=dict(entry.pop("config")), **entry)
    pairs = [(p.env, p.algo) for p in out.values()]
    if len(set(pairs)) < len(pairs):  # `for_env` finds one preset per env and algorithm
        twice = sorted({f"{e} ({a})" for e, a in pairs if pairs.count((e, a)) > 1})
        raise ValueError(f"{PRESETS_FILE}: more than one preset for {', '.join(twice)}")
    return out


def names() -> list[str]:
    """The presets' names."""
    return list(presets())


def get(name: str) -> Preset:
    """The preset ``name``; ``KeyError`` (naming the closest) for another."""
    found = presets().get(name)
    if found is None:
        import difflib

        close = difflib.get_close_matches(name, names(), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise KeyError(f"no preset {name!r}{hint}; presets: none, {', '.join(names())}")
    return found


def for_env(env: str, algo: str = "ppo") -> Preset | None:
    """The preset tuned for ``env`` and ``algo``, or None."""
    for preset in presets().values():
        if preset.env == env and preset.algo == algo:
            return preset
    return None
