// Hand reproductions of node-llama-cpp's divergences, with the library's public API alone (no
// specgate), on the vocabulary of qwen2.5-coder-0.5b-instruct from the specgate model cache. Each
// expected value is a literal obtained by running the named reference on the same GGUF: llama.cpp
// via llama-cpp-python 0.3.36 (Llama(gguf, vocab_only=True).detokenize(ids, special=True)) for
// bytes, HF tokenizers 0.23.3 on the exported tokenizer.json for the protocol's
// skip-unknown-ids rule. Exit 0 when every divergence still reproduces, 1 otherwise, 2 when the
// model is not cached.
//
//     node impl/ecosystem/node_llama_cpp/confirm.mjs

import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { modelDir, reportDivergences } from "../divergences.mjs";

const MODEL_ID = "qwen2.5-coder-0.5b-instruct";
const CHILD_FLAG = "--decode-in-child";

function ggufPath() {
  return join(modelDir(MODEL_ID), `${MODEL_ID}.gguf`);
}

async function vocabulary(path) {
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  return llama.loadModel({ modelPath: path, vocabOnly: true });
}

const hexOf = (text) => Buffer.from(text, "utf8").toString("hex");

/** Decoding in a child process: an abort there is an observable outcome, not the end of this run. */
function decodeInChild(ids) {
  const run = spawnSync(process.execPath, [fileURLToPath(import.meta.url), CHILD_FLAG, JSON.stringify(ids)], {
    encoding: "utf8",
    timeout: 300_000,
  });
  if (run.status === 0) return `hex ${run.stdout.trim()}`;
  const why = run.stderr.trim().split("\n").slice(-1)[0];
  return `process ended (${run.signal ?? `exit ${run.status}`}): ${why}`;
}

if (process.argv[2] === CHILD_FLAG) {
  const model = await vocabulary(ggufPath());
  console.log(hexOf(model.detokenize(JSON.parse(process.argv[3]), true)));
  process.exit(0);
}

if (!existsSync(ggufPath())) {
  console.log(`missing ${ggufPath()} (fetch it with \`specgate models fetch ${MODEL_ID}\`)`);
  process.exit(2);
}
const model = await vocabulary(ggufPath());

const DIVERGENCES = [
  {
    name: "detokenize answers U+FFFD for a token that is a lone UTF-8 byte (decode group, token-121)",
    got: () => hexOf(model.detokenize([121], true)),
    reference: "bd", // llama.cpp via llama-cpp-python 0.3.36: detokenize([121], special=True) == b"\xbd"
  },
  {
    name: "detokenize answers U+FFFD for a piece ending inside a UTF-8 character (decode group, token-1683)",
    got: () => hexOf(model.detokenize([1683], true)),
    reference: "20c3", // llama.cpp via llama-cpp-python 0.3.36: detokenize([1683], special=True) == b" \xc3"
  },
  {
    name: "detokenize of an id outside the vocabulary aborts the process (std::out_of_range) instead of skipping it (PROTOCOL.md 4.2)",
    got: () => decodeInChild([9707, 999999]),
    // HF tokenizers 0.23.3: decode([9707, 999999]) == "Hello" (the unknown id skipped, as the protocol asks);
    // llama-cpp-python 0.3.36 aborts the same way: the behaviour is llama.cpp's, inherited by the binding.
    reference: `hex ${hexOf("Hello")}`,
  },
];

reportDivergences(DIVERGENCES);
