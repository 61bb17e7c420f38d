"""Tuned settings per environment, as data: ``presets.toml`` in this package.

``jaxsample train --env NAME`` starts from the preset tuned for ``NAME``
and the ``--algo`` where there is one (`for_env`); ``--preset none`` gives
the plain config defaults, ``--preset NAME`` another preset. The naming rule
(`name_of`): a PPO preset is named after its env (``Pendulum-v1``), another
algorithm's after its env and its algorithm, ``ENV:ALGO``
(``Pendulum-v1:sac``), so that one env has a preset per algorithm and
``--env Pendulum-v1 --algo sac`` finds SAC's. Each entry names its source
(gymnax-blines' PPO files for gymnax's envs, rejax's for SAC and TD3,
purejaxql's for PQN, this project's own measured settings for the suites) and
how the source's settings became config fields. A preset is data only: the same
trainer runs it (no code path of its own). Imports no JAX.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.resources
import tomllib
from typing import Any

from jaxsample.algos import registry
from jaxsample.errors import ConfigTypeError

__all__ = [
    "PRESETS_FILE", "Preset", "for_env", "get", "name_of", "names", "presets", "resolve",
]  # fmt: skip

#: The data file, in this package (declared as package data).
PRESETS_FILE = "presets.toml"
_KEYS = {"env", "algo", "source", "mapping", "config"}
#: The algorithm whose presets are named after their env alone.
_PLAIN = "ppo"


def name_of(env: str, algo: str) -> str:
    """The name of ``algo``'s preset for ``env``: ``env`` for PPO, else
    ``"<env>:<algo>"``."""
    return env if algo == _PLAIN else f"{env}:{algo}"


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
        [`PPOConfig`][jaxsample.algos.configs.PPOConfig]) for its env, with
        ``overrides`` (config fields) on top: the one way a config is built
        from a preset, by ``jaxsample train`` (its config file's and flags'
        values, ``--env``, are the overrides) and by
        ``jaxsample.runs.train(preset=NAME, overrides=...)``.

        Raises:
          ConfigTypeError: an override that is no field of the config (the
            closest named); the config's own errors for a bad value.
        """
        config_type = registry.get(self.algo).config_type
        fields = [f.name for f in dataclasses.fields(config_type)]
        for name in sorted(set(overrides) - set(fields)):
            close = difflib.get_close_matches(name, fields, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigTypeError(name, f"is not a field of {config_type.__name__}{hint}")
        return config_type(**{"env_name": self.env, **self.values, **overrides})


@functools.cache
def presets() -> dict[str, Preset]:
    """Every preset of ``presets.toml``, by name, in the file's order."""
    text = importlib.resources.files("jaxsample.algos").joinpath(PRESETS_FILE).read_text()
    out = {}
    for name, entry in tomllib.loads(text).items():
        if set(entry) != _KEYS:
            raise ValueError(f"{PRESETS_FILE} [{name}]: keys {sorted(entry)}, want {sorted(_KEYS)}")
        if name != name_of(entry["env"], entry["algo"]):
            want = name_of(entry["env"], entry["algo"])
            raise ValueError(f"{PRESETS_FILE} [{name}]: a preset of {entry['algo']} for "
                             f"{entry['env']} is named {want!r}")  # fmt: skip
        out[name] = Preset(name=name, values=dict(entry.pop("config")), **entry)
    return out


def names() -> list[str]:
    """The presets' names."""
    return list(presets())


def get(name: str) -> Preset:
    """The preset ``name``; ``KeyError`` (naming the closest ones and listing
    all) for another."""
    found = presets().get(name)
    if found is None:
        close = difflib.get_close_matches(name, names(), n=3, cutoff=0.5)
        hint = ", ".join(close[:-1]) + " or " * (len(close) > 1) + close[-1] if close else ""
        hint = f" (did you mean {hint}?)" if hint else ""
        raise KeyError(f"no preset {name!r}{hint}; presets: none, {', '.join(names())}")
    return found


def for_env(env: str, algo: str = "ppo") -> Preset | None:
    """The preset tuned for ``env`` and ``algo`` (its name: `name_of`), or None."""
    return presets().get(name_of(env, algo))


def resolve(
    config: Any = None, preset: str | Preset | None = None, overrides: dict[str, Any] | None = None
) -> tuple[Any, str | None]:
    """``(config, preset name)``: what a run trains
    (`jaxsample.runs.train`'s ``config``, ``preset``, ``overrides``) and the
    preset it came from. Either ``config``, trained exactly as given (no
    preset), or the preset ``preset`` (a name, or a `Preset`) built into its
    config with ``overrides`` on top (`Preset.config`, as ``jaxsample
    train`` builds it: ``preset="CartPole-v1"`` is ``jaxsample train --env
    CartPole-v1``).

    Raises:
      ValueError: both ``config`` and ``preset``; ``overrides`` without a
        preset; an unknown preset (the closest names, and every name).
      TypeError: neither; an override that is no config field (the closest
        named).
    """
    if config is not None and preset is not None:
        raise ValueError(
            "pass config or preset, not both: a config is trained exactly as given; a "
            "preset's config with other values is preset=NAME, overrides={field: value}"
        )
    if preset is None:
        if config is None:
            raise TypeError("a run needs a config, or preset=NAME (a tuned config)")
        if overrides:
            raise ValueError(
                "overrides go with preset=NAME: a config is trained exactly as given "
                "(dataclasses.replace(config, ...) changes it)"
            )
        return config, None
    name = preset.name if isinstance(preset, Preset) else preset
    if not isinstance(name, str):
        raise TypeError(f"preset must be a preset's name, got {preset!r}")
    try:
        found = get(name)
    except KeyError as e:
        raise ValueError(f"preset: {e.args[0]}") from None
    return found.config(**(overrides or {})), found.name
