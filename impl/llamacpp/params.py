"""llama.cpp's reported model parameters: the dispatch reference on the same GGUF.

Read through llama.cpp's public C API (``llama_model_n_layer`` …, ``llama_vocab_eos``
…) rather than the raw metadata, so the values are what llama.cpp itself derived.
"""

from __future__ import annotations

from typing import Any

from impl.protocol import ModelRef, has_weights


def metadata_from_llamacpp(engine: Any, model: ModelRef) -> dict[str, Any]:
    import llama_cpp as C

    # In vocab-only mode llama.cpp does not load hyper-parameters (asking for them
    # aborts the process), so they are read from a full load where weights exist.
    weights = has_weights(model)
    llm = engine.llama(model, vocab_only=not weights)
    m = llm.model
    vocab = C.llama_model_get_vocab(m)

    def token(fn: Any) -> int | None:
        t = fn(vocab)
        return None if t < 0 else int(t)

    def single_id(text: str) -> int | None:
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        return (
            ids[0]
            if len(ids) == 1 and text in llm.detokenize(ids, special=True).decode("utf-8", "replace")
            else None
        )

    hparams = {"n_vocab": C.llama_vocab_n_tokens(vocab)}
    if weights:
        hparams |= {
            "n_layer": C.llama_model_n_layer(m),
            "n_embd": C.llama_model_n_embd(m),
            "n_head": C.llama_model_n_head(m),
            "n_head_kv": C.llama_model_n_head_kv(m),
            "n_ctx": C.llama_model_n_ctx_train(m),
        }
        # Not exposed through the C API; llama.cpp's own metadata parser supplies the
        # key it reads (n_embd_head_k = key_length, else n_embd / n_head).
        key_length = llm.metadata.get(f"{llm.metadata.get('general.architecture')}.attention.key_length")
        hparams["head_dim"] = int(key_length) if key_length else hparams["n_embd"] // hparams["n_head"]
    arch = llm.metadata.get("general.architecture")
    return {
        "architecture": arch,
        "hparams": hparams,
        "special": {
            "bos": token(C.llama_vocab_bos),
            "eos": token(C.llama_vocab_eos),
            "im_start": single_id("<|im_start|>"),
            "im_end": token(C.llama_vocab_eot)
            if token(C.llama_vocab_eot) is not None
            else token(C.llama_vocab_eos),
            "add_bos": bool(C.llama_vocab_get_add_bos(vocab)),
        },
    }
