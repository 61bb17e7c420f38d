"""Env names across suites: [`make`][jaxsample.envs.suites.make] and
[`available`][jaxsample.envs.suites.available].

A name is ``"<suite>/<env>"`` (``brax/inverted_pendulum``,
``brax-mjx/inverted_pendulum`` for Brax on MuJoCo XLA,
``jumanji/Snake-v1``, ``craftax/Craftax-Symbolic-v1``,
``navix/Navix-Empty-5x5-v0``, ``xminigrid/MiniGrid-Empty-5x5``,
``jaxmarl/MPE_simple_spread_v3`` for a multi-agent env,
``pgx/tic_tac_toe`` a two-player game) or a bare
gymnax name (``CartPole-v1``). The CLI, the trainers and ``jaxsample bench``
resolve names here.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import gymnax

__all__ = ["SUITES", "available", "import_error", "is_env_name", "make"]


def _maker(suite: str, **kwargs: Any) -> Callable[[str], Any]:
    """``make(name)`` of the adapter module ``jaxsample.envs.suites.<suite>``:
    its ``make_<suite>(name, **kwargs)``, imported on the first call."""

    def make_env(name: str) -> Any:
        module = importlib.import_module(f"jaxsample.envs.suites.{suite}")
        return getattr(module, f"make_{suite}")(name, **kwargs)

    return make_env


def _brax_names() -> list[str]:
    from jaxsample.envs.suites.base import import_quietly

    return sorted(import_quietly("brax.envs")._envs)


def _jumanji_names() -> list[str]:
    import jumanji

    return sorted(jumanji.registered_environments())


def _craftax_names() -> list[str]:
    return [
        "Craftax-Symbolic-v1",
        "Craftax-Pixels-v1",
        "Craftax-Classic-Symbolic-v1",
        "Craftax-Classic-Pixels-v1",
    ]


def _navix_names() -> list[str]:
    import navix

    return sorted(navix.registry())


def _pgx_names() -> list[str]:
    import pgx

    return sorted(pgx.available_envs())


def _xminigrid_names() -> list[str]:
    import xminigrid

    return sorted(n for n in xminigrid.registered_environments() if n.startswith("MiniGrid-"))


def _jaxmarl_names() -> list[str]:
    from jaxsample.envs.suites.base import import_quietly

    return sorted(import_quietly("jaxmarl").registered_envs)


#: suite prefix -> (the package it needs, its ``pip`` extra, make(name), names())
SUITES: dict[str, tuple[str, str, Callable[[str], Any], Callable[[], list[str]]]] = {
    "brax": ("brax", "brax", _maker("brax"), _brax_names),
    "brax-mjx": ("brax", "brax", _maker("brax", backend="mjx"), _brax_names),
    "jumanji": ("jumanji", "jumanji", _maker("jumanji"), _jumanji_names),
    "craftax": ("craftax", "craftax", _maker("craftax"), _craftax_names),
    "navix": ("navix", "navix", _maker("navix"), _navix_names),
    "xminigrid": ("xminigrid", "xminigrid", _maker("xminigrid"), _xminigrid_names),
    "jaxmarl": ("jaxmarl", "jaxmarl", _maker("jaxmarl"), _jaxmarl_names),
    "pgx": ("pgx", "pgx", _maker("pgx"), _pgx_names),
}


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def is_env_name(name: Any) -> bool:
    """Whether ``name`` is a gymnax name or has a known suite prefix (the env
    itself is checked by [`make`][jaxsample.envs.suites.make])."""
    if not isinstance(name, str):
        return False
    if "/" in name:
        return name.split("/", 1)[0] in SUITES
    return name in gymnax.registered_envs


def make(name: str) -> tuple[Any, Any]:
    """``(env, env_params)`` of ``name`` (see the module docstring); a
    ``ValueError`` naming it if the suite or the env is unknown or the suite
    is not installed."""
    if not isinstance(name, str):
        raise TypeError(f"env name must be a str, got {name!r}")
    if "/" not in name:
        if name not in gymnax.registered_envs:
            raise ValueError(
                f"env {name!r} is not a gymnax environment nor '<suite>/<env>' "
                f"with a suite of {sorted(SUITES)}{_did_you_mean(name, gymnax.registered_envs)}"
                "; `jaxsample envs` lists the names"
            )
        return gymnax.make(name)
    suite, env_name = name.split("/", 1)
    if suite not in SUITES:
        raise ValueError(
            f"env {name!r}: unknown suite {suite!r}, one of {sorted(SUITES)}"
            f"{_did_you_mean(suite, SUITES, '/' + env_name)}"
        )
    _, _, make_env, names = SUITES[suite]
    missing = unavailable(suite)
    if missing:
        raise ValueError(f"env {name!r}: {missing}")
    try:
        env = make_env(env_name)
    except Exception as e:  # the suites raise their own error types for unknown names
        try:
            known = names()
        except Exception:  # only a hint
            known = []
        hint = _did_you_mean(env_name, known, prefix=suite + "/") if env_name not in known else ""
        raise ValueError(
            f"env {name!r}: {type(e).__name__}: {e}{hint}; `jaxsample envs` lists the names"
        ) from None
    return env, env.default_params


def _did_you_mean(name: str, known: Any, suffix: str = "", prefix: str = "") -> str:
    """`` (did you mean 'CartPole-v1'?)`` for the closest of ``known``, else ``""``."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {prefix + close[0] + suffix!r}?)" if close else ""


def unavailable(suite: str) -> str:
    """``""`` if the suite (a key of ``SUITES``) is installed and imports,
    else one line saying why not (what to install, or `import_error`)."""
    package, extra, _, _ = SUITES[suite]
    if not _installed(package):
        return f"{package} is not installed (pip install jaxsample[{extra}])"
    return import_error(package)


def import_error(package: str) -> str:
    """``""`` if the installed ``package`` imports, else one line saying why
    not (a suite release that does not work with this JAX, typically)."""
    from jaxsample.envs.suites.base import import_quietly

    try:
        import_quietly(package)
    except Exception as e:
        import importlib.metadata

        import jax

        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "?"
        return (
            f"{package} {version} is installed but does not import with jax {jax.__version__} "
            f"({type(e).__name__}: {e}); the README's suite table lists the versions tested"
        )
    return ""


def available() -> dict[str, list[str]]:
    """Per installed suite prefix that imports, its env names (``"gymnax"``:
    gymnax's); `import_error` says why an installed one does not."""
    out = {"gymnax": sorted(gymnax.registered_envs)}
    for suite, (package, _, _, names) in SUITES.items():
        if _installed(package) and not import_error(package):
            out[suite] = names()
    return out
