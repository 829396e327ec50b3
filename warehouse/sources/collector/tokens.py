"""Bearer tokens for ``strata collect``: a file of ``<token> [<tenant>]`` lines, readable by its owner only.

A token that names a tenant makes that tenant the one of every span sent with it. Tokens
are compared in constant time, and never logged.
"""

from __future__ import annotations

import hmac
import stat
from dataclasses import dataclass
from pathlib import Path

from warehouse.settings import ConfigError

MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class Token:
    """One line of the tokens file."""

    secret: bytes
    tenant: str | None


@dataclass(frozen=True)
class Tokens:
    """The accepted tokens; :meth:`check` answers whether a header carries one, and its tenant."""

    tokens: tuple[Token, ...]

    def check(self, authorization: bytes | None) -> tuple[bool, str | None]:
        """(accepted, tenant) for an ``Authorization`` header value; every token is compared, in constant time."""
        scheme, _, presented = (authorization or b"").partition(b" ")
        presented = presented.strip()
        found: Token | None = None
        for token in self.tokens:
            if hmac.compare_digest(token.secret, presented) and scheme.lower() == b"bearer":
                found = token
        return (found is not None, found.tenant if found else None)


def load_tokens(path: Path) -> Tokens:
    """Read a tokens file; refuses one that others can read, and malformed lines (by line number)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"STRATA_COLLECT_TOKENS_FILE names {path}, which does not exist") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path} is readable by others (mode {stat.S_IMODE(mode):04o}): run chmod 600 {path}")
    tokens = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = [] if raw.lstrip().startswith("#") else raw.split()
        if not fields:
            continue
        if len(fields) > 2 or len(fields[0]) < MIN_TOKEN_CHARS:
            raise ConfigError(
                f"{path} line {number}: expected '<token> [<tenant>]' with a token of at least "
                f"{MIN_TOKEN_CHARS} characters"
            )
        tokens.append(Token(fields[0].encode(), fields[1] if len(fields) == 2 else None))
    if not tokens:
        raise ConfigError(f"{path} holds no token: add lines of '<token> [<tenant>]'")
    return Tokens(tuple(tokens))
