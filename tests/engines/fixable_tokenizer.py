"""A tokenizer engine whose defects are chosen on its command line: the oracle served
over PROTOCOL.md with classic tokenizer bugs planted, to gate it before and after a fix
(``specgate report diff``) and to check that each diagnosis of ``specgate.diagnose``
names its own bug and not a look-alike. The plants are written here, independently of
the diagnosis catalogue.

    python tests/engines/fixable_tokenizer.py [--defects nfc,lookahead,...]
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata

from planted_defects import serve_with_defects  # the sibling module (this script's folder is on sys.path)

from impl.oracle import OracleEngine
from oracle import pretokenize
from oracle.byte_level import to_standin
from oracle.tokenizer import Tokenizer


def normalizing(form: str) -> None:
    encode, split = Tokenizer.encode, Tokenizer.split
    Tokenizer.encode = lambda self, text, ps: encode(self, unicodedata.normalize(form, text), ps)
    Tokenizer.split = lambda self, text: split(self, unicodedata.normalize(form, text))


def replace_arm(old, new) -> None:
    if new is not None:
        new.starts_on = old.starts_on
    pretokenize.ARMS = tuple(
        new if a is old else a for a in pretokenize.ARMS if not (a is old and new is None)
    )


def digits_up_to(n: int):
    def digits(text, cls, i):
        if cls[i] != "N":
            return None
        end = i
        while end < len(cls) and end - i < n and cls[end] == "N":
            end += 1
        return end

    return digits


def wrap_encode(change) -> None:
    encode = OracleEngine.encode
    OracleEngine.encode = lambda self, model, text, ps: change(self, model, text, ps, encode)


def special_ids(self, model):
    """The model's special token ids (BOS, EOS ...), parsed once per GGUF: parsing a 150k-token
    vocabulary's header on every request made this engine 0.38 s a case (a 406-case encode
    row 156 s, every diagnosis test minutes)."""
    return _special_ids(str(model.gguf))


@functools.lru_cache(maxsize=8)
def _special_ids(path: str):
    from oracle.dispatch import dispatch
    from oracle.gguf import open_gguf

    return dispatch(open_gguf(path, header_only=True)).special


def wrap_decode(change) -> None:
    decode = Tokenizer.decode_bytes
    Tokenizer.decode_bytes = lambda self, ids: change(self, list(ids), decode)


def pieces(self, ids, decode, keep):
    return b"".join(decode(self, [i]) for i in ids if 0 <= i < len(self.tokens) and keep(self, i))


def nel_as_byte(self, model, text, ps, enc):
    """After a space, U+0085 encoded as the byte 0x85's token."""
    tok = self._tokenizer(model)
    head, *rest = text.split(" \x85")
    ids = enc(self, model, head, ps) if head else []
    for part in rest:
        ids += [
            *enc(self, model, " ", ps),
            tok.vocab[to_standin(b"\x85")],
            *(enc(self, model, part, ps) if part else []),
        ]
    return ids


@functools.lru_cache(maxsize=8)
def _control_texts(tok) -> re.Pattern[str]:
    """The model's control tokens' texts (parsed only when asked), longest first, as one pattern."""
    texts = sorted((t for t in tok.parsed.ids if t not in tok.always.ids), key=len, reverse=True)
    return re.compile("(" + "|".join(map(re.escape, texts)) + ")")


def control_text_cut(self, model, text, ps, enc):
    """In plain mode, each control token's text cut out as its own segment and tokenized
    alone (exactly the control tokens: no look-alike such as ``<|IM_END|>``)."""
    if ps:
        return enc(self, model, text, ps)
    parts = _control_texts(self._tokenizer(model)).split(text)
    return [i for part in parts if part for i in enc(self, model, part, ps)]


DEFECTS = {
    "nfc": lambda: normalizing("NFC"),
    "nfkc": lambda: normalizing("NFKC"),
    # a rare one: U+0085 (NEXT LINE) after a space encoded as the byte 0x85's token (its code point
    # taken for a byte), not as its UTF-8 bytes C2 85 — with nfc, the search's masked second bug
    "nel_byte": lambda: wrap_encode(nel_as_byte),
    "lookahead": lambda: replace_arm(pretokenize.trailing_space, None),
    "digits3": lambda: replace_arm(pretokenize.digit, digits_up_to(3)),
    "digits2": lambda: replace_arm(pretokenize.digit, digits_up_to(2)),  # a look-alike of digits3
    "specials_in_plain": lambda: wrap_encode(lambda self, m, text, ps, enc: enc(self, m, text, True)),
    # in plain mode a control token's text cut out as its own segment (each part tokenized alone)
    "specials_cut": lambda: wrap_encode(
        lambda self, m, text, ps, enc: (
            enc(self, m, text, ps)
            if ps
            else [i for part in re.split(r"(<\|[^|<>\s]*\|>)", text) if part for i in enc(self, m, part, ps)]
        )
    ),
    # the same, exactly the control tokens' texts: a frequent bug no catalogue entry names, which
    # localizes (the search's masking one in tests/search/test_given_cause.py)
    "control_text_cut": lambda: wrap_encode(control_text_cut),
    # a frequent one no catalogue entry names: every astral-plane character (above U+FFFF: emoji,
    # math letters, private use) read as U+FFFD, as a UTF-16 string that drops surrogate pairs
    "astral_fffd": lambda: wrap_encode(
        lambda self, m, text, ps, enc: enc(self, m, re.sub("[\U00010000-\U0010ffff]", "\ufffd", text), ps)
    ),
    "specials_ignored": lambda: wrap_encode(lambda self, m, text, ps, enc: enc(self, m, text, False)),
    "bos": lambda: wrap_encode(
        lambda self, m, text, ps, enc: [special_ids(self, m).bos, *enc(self, m, text, ps)]
    ),
    # a look-alike of bos: a BOS only when specials are parsed
    "bos_when_parsing": lambda: wrap_encode(
        lambda self, m, text, ps, enc: [special_ids(self, m).bos] * ps + enc(self, m, text, ps)
    ),
    "eos": lambda: wrap_encode(
        lambda self, m, text, ps, enc: [*enc(self, m, text, ps), special_ids(self, m).eos]
    ),
    "fffd": lambda: wrap_decode(
        lambda self, ids, dec: dec(self, ids).decode("utf-8", "replace").encode("utf-8")
    ),
    "unused_text": lambda: wrap_decode(
        lambda self, ids, dec: b"".join(
            self.tokens[i].encode() if i in self.silent else dec(self, [i])
            for i in ids
            if 0 <= i < len(self.tokens)
        )
    ),
    "control_dropped": lambda: wrap_decode(
        lambda self, ids, dec: pieces(
            self,
            ids,
            dec,
            lambda tok, i: i not in set(tok.parsed.ids.values()) - set(tok.always.ids.values()),
        )
    ),
}

if __name__ == "__main__":
    sys.exit(serve_with_defects(DEFECTS))
