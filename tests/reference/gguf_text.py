"""Turn token ids back into text from a GGUF's own vocabulary (GPT-2 style byte-level BPE).

Used by the reference scripts to show generated text without depending on any tokenizer library: each
normal token's characters map back to bytes through the inverse of GPT-2's byte-to-unicode table;
control and user-defined tokens (``<|im_end|>`` and friends) are emitted as their literal text.
"""

from __future__ import annotations

from gguf import GGUFReader

CONTROL = 3
USER_DEFINED = 4


def byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's byte-to-unicode table: printable stand-in character -> byte value."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


class GgufDetokenizer:
    """Detokenizer built from ``tokenizer.ggml.tokens`` and ``tokenizer.ggml.token_type``."""

    def __init__(self, reader: GGUFReader):
        self.tokens = reader.fields["tokenizer.ggml.tokens"].contents()
        self.types = reader.fields["tokenizer.ggml.token_type"].contents()
        self.decoder = byte_decoder()

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for."""
        piece = self.tokens[token_id]
        if self.types[token_id] in (CONTROL, USER_DEFINED):
            return piece.encode("utf-8")
        return bytes(self.decoder[ch] for ch in piece)

    def decode(self, ids: list[int]) -> str:
        """UTF-8 text of a token sequence (invalid byte sequences replaced)."""
        return b"".join(self.token_bytes(i) for i in ids).decode("utf-8", errors="replace")
