// Hand reproductions of the divergences the tokenizer gates found in @huggingface/tokenizers,
// with the library's public API alone (no specgate), on Qwen3's own tokenizer files from the
// specgate model cache (qwen3-vocab: tokenizer.json + tokenizer_config.json). Each expected value
// is a literal obtained by running the named reference on the same model:
// llama.cpp via llama-cpp-python 0.3.36 (Llama(qwen3-vocab.gguf, vocab_only=True)) for bytes, HF
// tokenizers 0.23.3 (Tokenizer.from_file(tokenizer.json)) for ids and strings.
// Exit 0 when every divergence still reproduces, 1 otherwise, 2 when the model files are missing.
//
//     node impl/ecosystem/hf_tokenizers/confirm.mjs

import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";
import { cachedFiles, reportDivergences, stringDecodeDivergences } from "../divergences.mjs";

const files = cachedFiles("qwen3-vocab", ["tokenizer.json", "tokenizer_config.json"]);
const [json, config] = files.map((path) => JSON.parse(readFileSync(path, "utf8")));
const tokenizer = new Tokenizer(json, config);

function decodeOrError(ids) {
  try {
    return tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  } catch (error) {
    return `<error: ${error.message}>`;
  }
}

const DIVERGENCES = [
  ...stringDecodeDivergences(decodeOrError),
  {
    name: "decode of no ids throws instead of answering the empty string (refused, ws-empty)",
    got: () => decodeOrError([]),
    reference: "", // HF tokenizers 0.23.3: decode([]) == "" (llama-cpp-python 0.3.36: b"")
  },
  {
    name: "no switch leaves control tokens as text: HF's encode_special_tokens / split_special_tokens are ignored (parse_special=false refused)",
    got: () =>
      JSON.stringify(
        tokenizer.encode("<|im_end|>", { add_special_tokens: false, encode_special_tokens: true, split_special_tokens: true }).ids,
      ),
    reference: "[27,91,318,6213,91,29]", // HF tokenizers 0.23.3 with encode_special_tokens = True (llama.cpp, special=False: same ids)
  },
];

reportDivergences(DIVERGENCES);
