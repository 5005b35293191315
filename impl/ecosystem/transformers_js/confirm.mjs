// Hand reproductions of the divergences the gates found in transformers.js 3 (npm
// @huggingface/transformers 3.8.1), with the library's public API alone (no specgate): AutoTokenizer
// on Qwen3's own tokenizer files from the specgate model cache (qwen3-vocab: tokenizer.json +
// tokenizer_config.json, local files only). Each expected value is a literal from the named reference
// on the same model. Exit 0 when every divergence still reproduces, 1 otherwise, 2 when the model
// files are missing.
//
//     node impl/ecosystem/transformers_js/confirm.mjs

import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { AutoTokenizer, env } from "@huggingface/transformers";
import { modelDir, reportDivergences } from "../divergences.mjs";

const dir = modelDir("qwen3-vocab");
const missing = ["tokenizer.json", "tokenizer_config.json"].map((n) => join(dir, n)).filter((p) => !existsSync(p));
if (missing.length > 0) {
  console.log(`missing ${missing.join(", ")} (fetch the model with \`specgate models fetch qwen3-vocab\`)`);
  process.exit(2);
}
env.allowRemoteModels = false;
env.localModelPath = `${dirname(dir)}/`;
const tokenizer = await AutoTokenizer.from_pretrained("qwen3-vocab", { local_files_only: true });
const hex = (text) => Buffer.from(text, "utf8").toString("hex");
const decoded = (ids) => tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });

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
    name: "thinking alias: the assistant's `thinking` is not given to the template as reasoning_content (render group, 14_thinking_alias)",
    got: () =>
      tokenizer.apply_chat_template(
        [
          { role: "user", content: "Pick a colour." },
          { role: "assistant", content: "Blue.", thinking: "Any colour will do." },
        ],
        { tokenize: false, add_generation_prompt: false },
      ),
    // transformers 5.24.0 apply_chat_template(tokenize=False) (snapshots/qwen3-vocab/render.json, 14_thinking_alias/no-gen)
    reference:
      "<|im_start|>user\nPick a colour.<|im_end|>\n<|im_start|>assistant\n<think>\nAny colour will do.\n</think>\n\nBlue.<|im_end|>\n",
  },
]);
