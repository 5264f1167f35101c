"""Validation-time checks of an ``env_url`` environment (``agilerl validate``): nothing is contacted,
nothing heavy is imported."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

_VAR = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$")


def _literal(value: str) -> bool:
    return bool(value) and not _VAR.match(value)


def url_credentials(url: str) -> list[str]:
    """What in ``url`` is written out that may be a secret, by name only (never the value).

    Every user-info part (``http://TOKEN@host``: a token as the user name is as secret as a
    password) and every query value (``?pw=...&code=...``: no key name tells a secret from a
    setting) counts: a literal one would be printed by ``validate`` and stored with the manifest
    in every checkpoint and the run directory. ``${VARIABLE}`` (read from the environment when the
    run starts) is the way to pass them.
    """
    try:
        parts = urlsplit(url if "://" in url else "http://" + url)
        username, password = parts.username, parts.password
    except ValueError:
        return []
    found = ["the user name"] if username and _literal(unquote(username)) else []
    found += ["a password"] if password is not None and _literal(unquote(password)) else []
    found += [f"the query parameter {k!r}" for k, v in parse_qsl(parts.query, keep_blank_values=True) if _literal(v)]
    return found


def env_url_problems(spec: Any) -> list[tuple[str, str]]:
    """``(field, why)`` for an ``env_url`` spec: ``max_turns`` given, ``prompt_template`` keys well formed,
    no credentials written into the URL."""
    problems: list[tuple[str, str]] = []
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
    return problems
