"""JAX environment suites as gymnax (>= 1.0) envs that every part of jaxsample
takes: Brax (and MJX), Jumanji, Craftax, Navix, XLand-MiniGrid, JaxMARL, Pgx
(one module each; see docs/guides/env-suites.md and ``docs/design.md``).

The suite modules import their suite only when called, so this package
imports without any suite installed.
"""

from jaxsample.envs.suites.base import NoParams, SuiteEnv, SuiteState, SuiteStep
from jaxsample.envs.suites.brax import BraxEnv, from_brax, make_brax
from jaxsample.envs.suites.craftax import CraftaxEnv, from_craftax, make_craftax
from jaxsample.envs.suites.jaxmarl import (
    JaxMARLEnv,
    MaskedJaxMARLEnv,
    from_jaxmarl,
    make_jaxmarl,
)
from jaxsample.envs.suites.jumanji import JumanjiEnv, from_jumanji, make_jumanji
from jaxsample.envs.suites.navix import NavixEnv, from_navix, make_navix
from jaxsample.envs.suites.pgx import PgxEnv, from_pgx, make_pgx, player_returns
from jaxsample.envs.suites.registry import SUITES, available, is_env_name, make, unavailable
from jaxsample.envs.suites.xminigrid import XMiniGridEnv, from_xminigrid, make_xminigrid

__all__ = [
    "SUITES",
    "BraxEnv",
    "CraftaxEnv",
    "JaxMARLEnv",
    "JumanjiEnv",
    "MaskedJaxMARLEnv",
    "NavixEnv",
    "NoParams",
    "PgxEnv",
    "SuiteEnv",
    "SuiteState",
    "SuiteStep",
    "XMiniGridEnv",
    "available",
    "from_brax",
    "from_craftax",
    "from_jaxmarl",
    "from_jumanji",
    "from_navix",
    "from_pgx",
    "from_xminigrid",
    "is_env_name",
    "make",
    "make_brax",
    "make_craftax",
    "make_jaxmarl",
    "make_jumanji",
    "make_navix",
    "make_pgx",
    "make_xminigrid",
    "player_returns",
    "unavailable",
]
