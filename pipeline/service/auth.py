"""Bearer tokens of the control API: read from a token file, kept only as hashes, compared in
constant time.

This module owns what a valid token is; the app decides which endpoints need one. A token is
never logged or kept in clear after loading: only its SHA-256 digest stays in memory.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

# Shorter secrets can be guessed by trying them against the API.
MIN_TOKEN_CHARS = 16


class TokenFileError(ValueError):
    """The token file is missing, unreadable, empty or holds a token too short to be safe."""


class TokenSet:
    """The SHA-256 digests of the accepted tokens."""

    def __init__(self, tokens: list[str]) -> None:
        if not tokens:
            raise TokenFileError("no token given: the API refuses to run without one")
        for number, token in enumerate(tokens, 1):
            if len(token) < MIN_TOKEN_CHARS or any(ch.isspace() for ch in token):
                raise TokenFileError(
                    f"token {number} is shorter than {MIN_TOKEN_CHARS} characters or holds "
                    "white space (generate one with `python -c 'import secrets; "
                    "print(secrets.token_urlsafe(32))'`)")
        self._digests = tuple(_digest(token) for token in tokens)

    def __len__(self) -> int:
        return len(self._digests)

    def accepts(self, presented: str) -> bool:
        """Whether `presented` is one of the tokens. Every digest is compared, each in
        constant time, so the answer's timing says nothing about which one or how close."""
        digest = _digest(presented)
        matched = False
        for known in self._digests:
            matched |= hmac.compare_digest(known, digest)
        return matched


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def load_tokens(path: str | Path) -> TokenSet:
    """Tokens from a file, one per line; blank lines and lines starting with '#' are skipped.
    Raises TokenFileError saying what is wrong (never quoting a token)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read token file {path}: {exc}") from exc
    tokens = [line.strip() for line in text.splitlines()
              if line.strip() and not line.lstrip().startswith("#")]
    if not tokens:
        raise TokenFileError(f"token file {path} holds no token: the API refuses to run "
                             "without one")
    return TokenSet(tokens)
