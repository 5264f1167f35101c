"""Validation-time checks of an ``env_url`` environment (``agilerl validate``): nothing is contacted,
nothing heavy is imported."""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote, unquote_plus, urlsplit

from agilerl_plugin_openenv.actions import is_mcp_action, params_of
from agilerl_plugin_openenv.config import _VAR as _ANY_VAR
from agilerl_plugin_openenv.config import SourceConfig, expand_env_vars
from agilerl_plugin_openenv.errors import OpenEnvError
from agilerl_plugin_openenv.urls import http_get_json, scrub, shown, url_problem

_VAR = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")


def _literal(value: str) -> bool:
    return bool(value) and not _VAR.match(value)


def url_credentials(url: str) -> list[str]:
    """What in ``url`` is written out that may be a secret, by name only (never the value).

    Every user-info part (``http://TOKEN@host``: a token as the user name is as secret as a
    password) and all query text count: every query value (``?pw=...&code=...``: no key name tells
    a secret from a setting), and a query part with no value, whose text is all there is (a bare
    ``?TOKEN``, or ``TOKEN=`` with nothing after it). A literal one would be printed by ``validate``
    and stored with the manifest in every checkpoint and the run directory. ``${VARIABLE}`` as the
    whole value (or the whole part), read from the environment when the run starts, is the way to
    pass them.
    """
    try:
        parts = urlsplit(url if "://" in url else "http://" + url)
        username, password = parts.username, parts.password
    except ValueError:
        return []
    found = ["the user name"] if username and _literal(unquote(username)) else []
    found += ["a password"] if password is not None and _literal(unquote(password)) else []
    for n, piece in enumerate((p for p in parts.query.split("&") if p), start=1):
        key, sep, value = (unquote_plus(x) for x in piece.partition("="))
        if not sep:
            if _literal(key):  # never named by its text: the text may be the token itself
                found.append(f"query part {n} (text with no '=')")
        elif value:
            if _literal(value):
                found.append(f"the query parameter {key!r}")
        elif _literal(key):
            found.append(f"query part {n} (a key with an empty value)")
    return found


def env_url_problems(spec: Any, manifest: Any = None) -> list[tuple[str, str]]:
    """``(field, why)`` for an ``env_url`` spec: ``max_turns`` given, ``prompt_template`` keys well formed,
    no credentials written into the URL, every URL usable (scheme, host, port, ``${VARIABLE}`` set),
    and, given the ``manifest`` and unless its ``validation.check_env`` is false, each server reachable and its schema agreeing with
    ``action_field``/``observation_field``/``mcp_tool`` (:func:`live_problems`)."""
    problems: list[tuple[str, str]] = env_url_address_problems(spec)
    addresses_ok = not problems
    if getattr(spec, "max_turns", None) is None:
        problems.append((
            "max_turns",
            "required with env_url: the most replies an episode may take (a server cannot be asked; "
            "episodes that go on longer end as truncated), e.g. max_turns: 1 for a single-turn env",
        ))  # fmt: skip
    from agilerl_plugin_llm.rollout.sources import RolloutSourceError, check_prompt_template

    try:
        check_prompt_template(getattr(spec, "prompt_template", None))
    except RolloutSourceError as exc:
        problems.append(("prompt_template", str(exc).partition(": ")[2] or str(exc)))
    urls = spec.env_url if isinstance(spec.env_url, (list, tuple)) else [spec.env_url]
    for i, url in enumerate(urls):
        found = url_credentials(str(url))
        if found:
            where = "env_url" + (f"[{i}]" if len(urls) > 1 else "")
            problems.append((
                where,
                f"holds {' and '.join(found)} written out, which would be stored with the manifest in the run "
                "directory and checkpoints; write the secret part as ${VARIABLE} (read from the environment when the "
                "run starts) or send it as a header with env_url_headers_from_env: {Authorization: VARIABLE}",
            ))  # fmt: skip
    # With the manifest (as validation calls it), each server is asked once unless validation.check_env: false.
    validation = getattr(manifest, "validation", None)
    if manifest is not None and addresses_ok and not problems and getattr(validation, "check_env", True):
        problems += live_problems(spec)
    return problems


#: Seconds the live check at validation waits for each replica (the run itself uses request_timeout_s).
LIVE_CHECK_TIMEOUT_S = 3.0


def _var_problems(text: str, where: str) -> list[tuple[str, str]]:
    return [(where, f"uses ${{{name}}}, but the environment variable {name} is not set; export it before the run "
             "(or write the value out where it is not a secret)")
            for name in dict.fromkeys(_ANY_VAR.findall(text)) if name not in os.environ]  # fmt: skip


def env_url_address_problems(spec: Any) -> list[tuple[str, str]]:
    """Each replica URL: variables set, then scheme, host and port usable; header variables set."""
    problems: list[tuple[str, str]] = []
    urls = spec.env_url if isinstance(spec.env_url, (list, tuple)) else [spec.env_url]
    if not urls:
        return [("env_url", "an empty list: give at least one OpenEnv server URL, e.g. http://127.0.0.1:8000")]
    for i, url in enumerate(urls):
        where = "env_url" + (f"[{i}]" if len(urls) > 1 else "")
        unset = _var_problems(str(url), where)
        if unset:
            problems += unset
            continue
        text, _ = expand_env_vars(str(url), where)
        why = url_problem(text)
        if why:
            problems.append((where, f"{shown(str(url))} is not a usable URL: {why}. Use e.g. http://127.0.0.1:8000"))
    for header, var in (getattr(spec, "env_url_headers_from_env", None) or {}).items():
        if var not in os.environ:
            problems.append((f"env_url_headers_from_env.{header}", (
                f"reads the environment variable {var}, which is not set; export it before the run")))  # fmt: skip
    return problems


def live_problems(spec: Any, timeout: float = LIVE_CHECK_TIMEOUT_S) -> list[tuple[str, str]]:
    """Ask each replica once for its schema (``GET /schema``, ``timeout`` seconds each): unreachable
    replicas, and ``action_field``/``observation_field``/``mcp_tool`` the server's schema rules out."""
    import urllib.error

    try:
        config = SourceConfig.from_spec(spec)
    except OpenEnvError:
        return []  # reported by the address checks
    off = " (or set validation: {check_env: false} to validate without contacting it)"
    problems: list[tuple[str, str]] = []
    schemas: list[tuple[str, Any]] = []
    for i, rep in enumerate(config.replicas):
        where = "env_url" + (f"[{i}]" if len(config.replicas) > 1 else "")
        try:
            schemas.append((rep.display, http_get_json(rep, "/schema", config.headers, timeout)))
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                problems.append((where, f"the server at {rep.display} refused the request (HTTP {exc.code}): check "
                                 f"the credentials in env_url or env_url_headers_from_env{off}"))  # fmt: skip
            # another status (404: no /schema route): reachable; the run sends actions as text
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            problems.append(
                (
                    where,
                    (
                        f"the OpenEnv server at {rep.display} is not reachable ({scrub(str(reason), rep)}, within "
                        f"{timeout:g} s); start it (e.g. agilerl serve-env module:TextEnv --port N) or fix the URL{off}"
                    ),
                )
            )
        except ValueError:
            pass  # not JSON: the run reads the schema again and falls back to text actions
    if problems or not schemas:
        return problems
    where, schema = schemas[0]
    if not isinstance(schema, dict):
        return []
    action = schema.get("action") or {}
    if config.mcp_tool and action and not is_mcp_action(action):
        fields = ", ".join(p.name for p in params_of(action)) or "none"
        problems.append(("mcp_tool", f"the server at {where} is not an MCP tool environment (its action has the "
                         f"fields {fields}); remove mcp_tool{off}"))  # fmt: skip
    names = [p.name for p in params_of(action)]
    if config.action_field and names and not is_mcp_action(action) and config.action_field not in names:
        problems.append(("action_field", f"{config.action_field!r} is not a field of the action the server at {where} "
                         f"takes (its fields: {', '.join(sorted(names))}); name one of them or remove action_field{off}"))  # fmt: skip
    if config.action_field and is_mcp_action(action):
        problems.append(("action_field", f"the server at {where} is an MCP tool environment (its action is a tool "
                         "call); remove action_field (set mcp_tool to allow only one tool)"))  # fmt: skip
    obs = {p.name for p in params_of(schema.get("observation") or {}, skip=("metadata", "reward", "done"))}
    if config.observation_field and obs and config.observation_field not in obs:
        problems.append(("observation_field", f"{config.observation_field!r} is not a field of the observation of the "
                         f"server at {where} (its fields: {', '.join(sorted(obs))}){off}"))  # fmt: skip
    return problems
