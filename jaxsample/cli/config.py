"""``jaxsample train``'s settings: flags generated from the config dataclasses,
a TOML/YAML config file, and hyperparameter sweeps.

Every field of [`PPOConfig`][jaxsample.algos.configs.PPOConfig] /
[`DQNConfig`][jaxsample.algos.configs.DQNConfig] becomes a flag (``num_envs`` ->
``--num-envs``) whose help shows its type and default. The layers, lowest
first: the dataclass defaults (or the masked-CartPole preset with
``--mask-velocity``), the ``--config`` file, the flags. A field of the
algorithm's ``HParams`` (PPO: ``lr``, ``clip_eps``, ``ent_coef``,
``vf_coef``; DQN: ``lr``, ``gamma``) may be given a list (``--lr
1e-3,2.5e-4`` or ``lr = [1e-3, 2.5e-4]`` in the file): every combination of
the listed values is trained, for every seed, in one vmapped program.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from typing import Any, NamedTuple

from jaxsample.algos import presets, registry
from jaxsample.cli.flags import FlagValueError, add_bool_flag, canonical_keys
from jaxsample.errors import ConfigError, UsageError

__all__ = [
    "Resolved",
    "add_config_flags",
    "config_flag_values",
    "config_type",
    "field_flag",
    "load_config_file",
    "resolve_config",
    "sweep_fields",
    "usage_error",
]

#: Fields set by other flags: ``--env``, ``--algo`` (``recurrent``), ``--mask-velocity``.
_OWN_FLAGS = {"env_name": "--env", "recurrent": "--algo", "mask_velocity": "--mask-velocity"}
#: Field flags named otherwise than ``--<field>`` (which they take too).
_RENAMED = {"total_timesteps": "--total-steps"}
#: Flags of the train command that a config file may set too; ``env_name``
#: and ``recurrent`` (the JSON's ``config`` holds them) stand for ``env`` and
#: ``algo`` (``ppo-rnn`` when true).
_COMMAND_KEYS = (
    "algo", "env", "seed", "seeds", "chunks", "mask_velocity", "env_name", "recurrent", "preset",
)  # fmt: skip


def file_algo(values: dict[str, Any]) -> str | None:
    """The ``--algo`` a config file sets: its ``algo``, else the algorithm its
    ``recurrent`` fixes (``ppo-rnn`` / ``ppo``), else the first whose config
    has a field it sets that the default algorithm's lacks (a JSON's
    ``config`` written back as a file), else None."""
    if values.get("algo") is not None:
        return values["algo"]
    for algorithm in registry.ALGORITHMS.values():
        fixed = algorithm.fixed.items()
        if fixed and all(type(values.get(k)) is type(v) and values[k] == v for k, v in fixed):
            return algorithm.name
    known = {f.name for f in dataclasses.fields(registry.get(registry.DEFAULT).config_type)}
    for algorithm in registry.ALGORITHMS.values():
        if set(values) & ({f.name for f in dataclasses.fields(algorithm.config_type)} - known):
            return algorithm.name
    return None


def file_env(values: dict[str, Any]) -> Any:
    """The env a config file sets: its ``env``, else ``env_name``, else None."""
    return values.get("env", values.get("env_name"))


def config_type(algo: str) -> type:
    """The config dataclass of ``--algo``."""
    return registry.get(algo).config_type


def sweep_fields(algo: str) -> tuple[str, ...]:
    """The fields of the algorithm's ``HParams``: the ones a list may sweep."""
    return registry.get(algo).hparams_fields


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def field_flag(name: str, typed: dict[str, str] | None = None) -> str:
    """The train command's flag of the config field ``name``: the name the
    command line gave it (``typed``: `jaxsample.cli.flags.typed_flags`, e.g.
    ``--learning-rate`` or ``--total-timesteps``), else the name
    `add_config_flags` gives it (``env_name``: ``--env``,
    ``total_timesteps``: ``--total-steps``, ``num_envs``: ``--num-envs``)."""
    ours = _OWN_FLAGS.get(name) or _RENAMED.get(name) or _flag(name)
    typed = typed or {}
    return typed.get(name) or typed.get(ours[2:].replace("-", "_")) or ours


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _base(tp: Any) -> tuple[Any, bool]:
    """``(type, optional)`` of a field annotation (``float | None`` -> ``(float, True)``)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return inner, True
    return tp, False


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "''"
    return str(value).lower() if value is None or isinstance(value, bool) else str(value)


def _parse(name: str, tp: Any, text: str, sweep: bool) -> Any:
    """One flag value from its text; raises a `FlagValueError` (the parser
    names the flag as typed)."""
    inner, optional = _base(tp)
    if optional and text.lower() == "none":
        return None
    try:
        if typing.get_origin(inner) is tuple:
            if not text.strip():
                return ()
            tokens = text.split(",")
            if any(not t.strip() for t in tokens):
                raise FlagValueError(name, f"{text!r}: an empty size between commas")
            return tuple(int(t) for t in tokens)
        if inner is float and sweep and "," in text:
            return [float(t) for t in text.split(",")]
        if inner is float:
            return float(text)
        if inner is int:
            return int(text.replace("_", ""))
        return text
    except ValueError:
        kind = "comma-separated ints" if typing.get_origin(inner) is tuple else inner.__name__
        lists = " (or a comma-separated list to sweep)" if sweep else ""
        raise FlagValueError(name, f"{text!r}: expected {kind}{lists}") from None


def add_config_flags(
    parser: argparse.ArgumentParser, algo: str, start: Any = None, where: str | None = None
) -> None:
    """One flag per config field of ``algo`` (not given: absent from the
    namespace), its help showing the field's value in ``start`` (a config the
    run starts from: a preset's, named by ``where``) as the default, else the
    dataclass default."""
    cls = config_type(algo)
    hints = _field_types(cls)
    sweep = sweep_fields(algo)
    shown = f"; defaults: {where}" if where else ""
    group = parser.add_argument_group(
        f"{cls.__name__} fields (--algo {algo}; lists sweep {', '.join(sweep)}{shown})"
    )
    for field in dataclasses.fields(cls):
        if field.name in _OWN_FLAGS:
            continue
        tp = hints[field.name]
        inner, _ = _base(tp)
        names = list(dict.fromkeys([field_flag(field.name), _flag(field.name)]))
        value = field.default if start is None else getattr(start, field.name)
        default = f"default: {_show(value)}"
        if inner is bool:  # --x, --x false, --x=False (CleanRL's), --no-x
            add_bool_flag(
                group, field.name, field.name, f"({default}; {_flag('no_' + field.name)})"
            )
            continue
        kind = "INTS" if typing.get_origin(inner) is tuple else inner.__name__.upper()
        if field.name in sweep:
            kind = "FLOAT[,FLOAT...]"
        group.add_argument(
            *names,
            dest=field.name,
            metavar=kind,
            default=argparse.SUPPRESS,
            type=lambda text, n=field.name, t=tp, s=field.name in sweep: _parse(n, t, text, s),
            help=f"({default})",
        )


def config_flag_values(args: argparse.Namespace, algo: str) -> dict[str, Any]:
    """The config fields given as flags (those `add_config_flags` added)."""
    fields = {f.name for f in dataclasses.fields(config_type(algo))} - set(_OWN_FLAGS)
    return {k: v for k, v in vars(args).items() if k in fields}


def load_config_file(path: str) -> dict[str, Any]:
    """The settings of a ``.toml`` (stdlib ``tomllib``) or ``.yaml``/``.yml``
    (PyYAML) file: a flat table of config fields and train-command keys
    (CleanRL's names too: ``learning_rate`` is ``lr``)."""
    if not os.path.isfile(path):
        raise UsageError(f"--config {path!r}: no such file")
    try:
        if path.endswith(".toml"):
            import tomllib

            with open(path, "rb") as f:
                data = tomllib.load(f)
        elif path.endswith((".yaml", ".yml")):
            try:
                import yaml
            except ImportError:
                raise UsageError("--config: YAML needs PyYAML (pip install pyyaml)") from None
            with open(path) as f:
                data = yaml.safe_load(f) or {}
        else:
            raise UsageError(f"--config {path!r}: give a .toml, .yaml or .yml file")
    except UsageError:
        raise
    except Exception as e:  # the parsers' own errors carry line and column
        raise UsageError(f"--config {path!r}: {e}".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path!r}: expected a table of settings")
    return canonical_keys({str(k).replace("-", "_"): v for k, v in data.items()}, path)


def _from_file(name: str, value: Any, tp: Any, sweep: bool, path: str) -> Any:
    """A config-file value checked against the field's type (lists only to sweep)."""
    inner, optional = _base(tp)
    if value is None and optional:
        return None
    if isinstance(value, list) and typing.get_origin(inner) is not tuple:
        if not sweep:
            raise UsageError(f"--config {path!r}: {name} takes one value, not a list")
        return [_from_file(name, v, tp, False, path) for v in value]
    if typing.get_origin(inner) is tuple and isinstance(value, list):
        return tuple(value)
    if inner is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if inner is float and isinstance(value, str):  # PyYAML reads 1e-3 as a str
        try:
            return float(value)
        except ValueError:
            raise UsageError(f"--config {path!r}: {name} must be a float, got {value!r}") from None
    return value


def choose_preset(name: Any, algo: str, env: str, mask_velocity: bool) -> Any:
    """The run's [`Preset`][jaxsample.algos.presets.Preset] or None: ``name``
    (``--preset`` or the file's ``preset``; ``"none"``: none), else the one
    tuned for ``env`` and ``algo`` (none with ``--mask-velocity``, which has
    its own)."""
    if name is None:
        return None if mask_velocity else presets.for_env(env, algo)
    if not isinstance(name, str):
        raise UsageError(f"--preset must be a name or none, got {name!r}")
    if name.lower() == "none":
        return None
    try:
        preset = presets.get(name)
    except KeyError as e:
        raise UsageError(f"--preset: {e.args[0]}") from None
    if registry.get(algo).trainer != preset.algo:
        raise UsageError(f"--preset {name!r} is for --algo {preset.algo}, not {algo}")
    if mask_velocity:
        raise UsageError("--preset goes without --mask-velocity (which has its own preset)")
    return preset


def _check_known(file_values: dict[str, Any], fields: set[str], algo: str, path: Any) -> None:
    """A ``UsageError`` for the settings of a config file that are neither
    ``algo``'s config fields nor the train command's keys (the closest named)."""
    unknown = sorted(set(file_values) - fields - set(_COMMAND_KEYS))
    if not unknown:
        return
    import difflib

    known = sorted(fields | set(_COMMAND_KEYS))
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, known, n=1)
        if close:
            hints.append(close[0] if len(unknown) == 1 else f"{close[0]} for {name}")
    hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
    raise UsageError(
        f"--config {path!r}: unknown setting(s) {', '.join(unknown)} for --algo {algo}"
        f"{hint}; `jaxsample train --algo {algo} --help` lists them"
    )


def usage_error(
    error: Exception,
    file_values: dict[str, Any],
    flags: dict[str, Any],
    path: Any,
    flag_names: dict[str, str] | None = None,
) -> UsageError:
    """``error`` of a config as a `UsageError` naming where its field was set: a
    [`ConfigError`][jaxsample.errors.ConfigError]'s ``field`` (data, not its
    message's first word) as its flag (`field_flag`: as typed, from
    ``flag_names``; else ``env_name`` is ``--env``), or as the config file's
    key when the file set it and no flag did; another error's message as it
    is."""
    if not isinstance(error, ConfigError):
        return UsageError(str(error))
    if error.field in set(file_values) - set(flags) - set(_OWN_FLAGS):
        return UsageError(f"--config {path!r}: {error}")
    return UsageError(error.named(field_flag(error.field, flag_names)))


class Resolved(NamedTuple):
    """What `resolve_config` resolves.

    Attributes:
      config: the algorithm's config.
      sweep: ``{field: values}`` of the swept ``HParams`` fields (the config
        holds the first values).
      overrides: the fields set over the preset (``--env``, the file's, the
        flags', the algorithm's fixed ones):
        ``preset.config(**overrides)`` is ``config``, what
        ``jaxsample.runs.train(preset=..., overrides=...)`` trains.
    """

    config: Any
    sweep: dict[str, list[float]]
    overrides: dict[str, Any]


def resolve_config(
    algo: str,
    env: str,
    mask_velocity: bool,
    file_values: dict[str, Any],
    flags: dict[str, Any],
    path: str | None = None,
    preset: Any = None,
    flag_names: dict[str, str] | None = None,
) -> Resolved:
    """The algorithm's config: the defaults, then the ``preset``'s values
    (`jaxsample.algos.presets.Preset.config`), then the file, then the
    flags; with the swept ``HParams`` fields and the overrides of the preset
    (`Resolved`).

    Raises ``UsageError`` naming the flag (as typed: ``flag_names``) or file
    key of a bad value.
    """
    algorithm = registry.get(algo)
    hints = _field_types(algorithm.config_type)
    fields = {f.name for f in dataclasses.fields(algorithm.config_type)} - set(_OWN_FLAGS)
    _check_known(file_values, fields, algo, path)
    values = {
        k: _from_file(k, v, hints[k], k in algorithm.hparams_fields, str(path))
        for k, v in file_values.items()
        if k in fields
    }
    values.update(flags)
    sweep = {k: v for k, v in values.items() if isinstance(v, list)}
    for name, listed in sweep.items():
        if not listed:
            raise UsageError(f"{field_flag(name, flag_names)}: an empty list")
        values[name] = listed[0]  # the config holds the first; the sweep overrides it
    overrides = {"env_name": env, **values, **algorithm.fixed}
    if mask_velocity and algorithm.masked_config is None:
        masked = [a.name for a in registry.ALGORITHMS.values() if a.masked_config is not None]
        raise UsageError(f"--mask-velocity goes with --algo {' or '.join(masked)}")

    def build(**changed: Any) -> Any:  # with --mask-velocity: the POMDP preset
        if preset is not None:
            return preset.config(**{**overrides, **changed})
        return algorithm.config(mask_velocity, **{**overrides, **changed})

    try:
        config = build()
        for name, listed in sweep.items():  # every swept value, not only the first
            for value in listed[1:]:
                build(**{name: value})
        return Resolved(config, sweep, overrides)
    except (TypeError, ValueError) as e:
        raise usage_error(e, file_values, flags, path, flag_names) from None
