// Hand reproductions of the divergences the gates found in @lenml/tokenizers 3.7.2, with the
// library's public API alone (no specgate): TokenizerLoader.fromPreTrained on Qwen3's own tokenizer
// files from the specgate model cache (qwen3-vocab: tokenizer.json + tokenizer_config.json). Each
// expected value is a literal from the named reference on the same model. Exit 0 when every
// divergence still reproduces, 1 otherwise, 2 when the model files are missing.
//
//     node impl/ecosystem/lenml_tokenizers/confirm.mjs

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";
import { modelDir, reportDivergences } from "../divergences.mjs";

const files = ["tokenizer.json", "tokenizer_config.json"].map((n) => join(modelDir("qwen3-vocab"), n));
const missing = files.filter((p) => !existsSync(p));
if (missing.length > 0) {
  console.log(`missing ${missing.join(", ")} (fetch the model with \`specgate models fetch qwen3-vocab\`)`);
  process.exit(2);
}
const [tokenizerJSON, tokenizerConfig] = files.map((p) => JSON.parse(readFileSync(p, "utf8")));
const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const hex = (text) => Buffer.from(text, "utf8").toString("hex");
const decoded = (ids) => tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });

function rendered(messages) {
  try {
    return tokenizer.apply_chat_template(messages, { tokenize: false, add_generation_prompt: true });
  } catch (error) {
    return `<error: ${error.message.split("\n")[0]}>`;
  }
}

reportDivergences([
  {
    name: "decode answers U+FFFD for a token that is a lone UTF-8 byte (decode group, token-121)",
    got: () => hex(decoded([121])),
    reference: "bd", // llama.cpp via llama-cpp-python 0.3.36: detokenize([121]) == b"\xbd"
  },
  {
    name: "decode answers U+FFFD for a piece ending inside a UTF-8 character (decode group, token-1683)",
    got: () => hex(decoded([1683])),
    reference: "20c3", // llama.cpp via llama-cpp-python 0.3.36: detokenize([1683]) == b" \xc3"
  },
  {
    name: "the bundled Jinja cannot parse Qwen3's own chat template (render refusals, 01_single_user)",
    got: () => rendered([{ role: "user", content: "What is the capital of France?" }]),
    // transformers 5.24.0 apply_chat_template(tokenize=False, add_generation_prompt=True)
    // (snapshots/qwen3-vocab/render.json, case 01_single_user/gen)
    reference: "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
  },
]);
