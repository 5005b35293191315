// node-llama-cpp (llama.cpp's Node.js binding) as a specgate `cmd:` engine speaking PROTOCOL.md
// (`specgate-jsonl/1`): stages encode, decode, logits (top-k form, quantized class), generate
// (greedy) and the state stages (sessions). Standalone: node builtins, node-llama-cpp and ../jsonl.mjs only; CPU only (`gpu: false`).
//
//     node impl/ecosystem/node_llama_cpp/adapter.mjs
//
// What the library's public API gives, and what is refused:
// - encode: LlamaModel.tokenize(text, specialTokens = parse_special) — no BOS is added.
// - decode: LlamaModel.detokenize(ids, true) returns a JavaScript string, never bytes; the answer
//   is that string encoded as UTF-8 (a piece ending inside a UTF-8 character comes back U+FFFD).
// - logits: the API exposes no logits, only the sampler's probabilities
//   (LlamaContextSequence.controlledEvaluate with generateNext.probabilities). With temperature 1
//   and top-k / top-p / min-p disabled those are softmax(logits) over the whole vocabulary, so the
//   answer is the protocol's top-k form with ln(p) as the k values and lse = ln(sum p): the
//   log-probabilities are the engine's own, the logits' additive constant is not observable. The
//   full-array form (top_k = 0) is refused: float32 probabilities underflow to 0 far from the top.
// - generate: greedy only (temperature < 1e-6) through LlamaContextSequence.evaluate with
//   temperature 0; sampled generation is refused (the protocol's draws come from Python's
//   random.Random, node-llama-cpp samples with llama.cpp's own RNG), and so are penalties other
//   than neutral (this adapter does not map them onto the library's repeatPenalty option).
// - session (the session_* ops, PROTOCOL.md 4.7; the state stages): a session is a
//   LlamaContextSequence of its own context — the KV state the library's LlamaChatSession keeps
//   between prompts. session_append evaluates the ids after the sequence's history
//   (controlledEvaluate, the probabilities asked at the last one only) and answers the
//   sequence's own nextTokenIndex as n_past; session_truncate erases the tokens from n on
//   (eraseContextTokenRanges, llama.cpp's KV sequence removal); session_close disposes of the
//   context. The logits are the top-k form as for logits (probabilities, not logits).

import { getLlama, LlamaLogLevel, readGgufFileInfo } from "node-llama-cpp";
import { BadRequest, Refusal, packageVersion, serve } from "../jsonl.mjs";

const CONTEXT_SIZE = 4096;
// One evaluation thread: on this 2-core machine shared with other processes, llama.cpp's
// spinning worker threads (the library's default is 4) slow a token from 0.15 s to 30 s.
const THREADS = 1;
const GREEDY_BELOW = 1e-6;
const LOGITS_CHUNK = 16;
const GENERATE_DEFAULTS = {
  temperature: 0.8,
  top_k: 40,
  top_p: 0.95,
  min_p: 0.0,
  repeat_penalty: 1.1,
  frequency_penalty: 0.0,
  presence_penalty: 0.0,
  penalty_last_n: 64,
  seed: 42,
  max_tokens: 128,
  stop: [],
  top_candidates: 3,
};
// The sampler options under which the probabilities the library reports are softmax(logits).
const PLAIN_SOFTMAX = { temperature: 1, topK: 0, topP: 1, minP: 0 };

// ---- models ----------------------------------------------------------------------------------

let llamaPromise = null;
const models = new Map(); // gguf path -> Promise<{model, sequence?}>

function llama() {
  llamaPromise ??= getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  return llamaPromise;
}

/** The model, loaded once per file: vocabulary only when the GGUF holds no tensors (the
 * vocabulary models ship without weights whatever their manifest role), as the library's own
 * GGUF reader says. */
function loadedModel(model) {
  if (!models.has(model.gguf)) {
    const load = async () => {
      const engine = await llama();
      const info = await readGgufFileInfo(model.gguf, { readTensorInfo: false });
      const vocabOnly = Number(info.tensorCount) === 0;
      return { model: await engine.loadModel({ modelPath: model.gguf, vocabOnly }), vocabOnly, sequence: null };
    };
    models.set(model.gguf, load());
  }
  return models.get(model.gguf);
}

/** A context sequence with an empty history, created on first use. */
async function freshSequence(model) {
  const entry = await loadedModel(model);
  if (entry.vocabOnly) throw new Refusal("the GGUF is vocabulary-only: no weights to evaluate");
  if (entry.sequence === null) {
    const context = await entry.model.createContext({ contextSize: CONTEXT_SIZE, sequences: 1, threads: THREADS });
    entry.sequence = context.getSequence();
  } else {
    await entry.sequence.clearHistory();
  }
  return { model: entry.model, sequence: entry.sequence };
}

// ---- the stages ------------------------------------------------------------------------------

async function encode(request) {
  const { model } = await loadedModel(request.model);
  return Array.from(model.tokenize(request.text, request.parse_special !== false));
}

async function decode(request) {
  const { model } = await loadedModel(request.model);
  const text = model.detokenize(request.ids, true);
  return { $bytes: Buffer.from(text, "utf8").toString("base64") };
}

function base64Of(typedArray) {
  return Buffer.from(typedArray.buffer, typedArray.byteOffset, typedArray.byteLength).toString("base64");
}

function encodedArray(dtype, shape, typedArray) {
  return { $array: { dtype, shape, b64: base64Of(typedArray) } };
}

async function logits(request) {
  const topK = topKOf(request);
  if (request.ids.length === 0) throw new Refusal("no ids to evaluate");
  const { model, sequence } = await freshSequence(request.model);
  const n = request.ids.length;
  const nVocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const k = Math.min(topK, nVocab);
  const ids = new Int32Array(n * k);
  const values = new Float32Array(n * k);
  const lse = new Float64Array(n);
  const everyPosition = { generateNext: { probabilities: true, options: PLAIN_SOFTMAX } };
  // The sequence keeps its history between calls: evaluating the prompt in chunks keeps only one
  // chunk's probability maps (a whole vocabulary each) alive at a time.
  for (let start = 0; start < n; start += LOGITS_CHUNK) {
    const chunk = request.ids.slice(start, start + LOGITS_CHUNK).map((id) => [id, everyPosition]);
    const outputs = await sequence.controlledEvaluate(chunk);
    outputs.forEach((output, offset) => {
      writeTopRow(output.next.probabilities, nVocab, k, start + offset, ids, values, lse);
    });
  }
  return topKForm(nVocab, n, k, ids, values, lse);
}

/** The top-k form of one row from the sampler's probability map (PLAIN_SOFTMAX: softmax of the
 * logits over the whole vocabulary, by descending probability), written at `row`. */
function writeTopRow(probabilities, nVocab, k, row, ids, values, lse) {
  if (probabilities.size !== nVocab) {
    throw new Error(`the sampler reported ${probabilities.size} probabilities, not the vocabulary's ${nVocab}`);
  }
  let total = 0;
  let column = 0;
  for (const [id, p] of probabilities) {
    total += p;
    if (column < k) {
      ids[row * k + column] = id;
      values[row * k + column] = Math.log(p);
      column += 1;
    }
  }
  lse[row] = Math.log(total);
}

/** The protocol's top-k form (PROTOCOL.md 4.3) of `n` rows of `k` candidates. */
function topKForm(nVocab, n, k, ids, values, lse) {
  return {
    top_k: {
      n_vocab: nVocab,
      ids: encodedArray("int32", [n, k], ids),
      logits: encodedArray("float32", [n, k], values),
      lse: encodedArray("float64", [n], lse),
    },
  };
}

function topKOf(request) {
  const topK = request.top_k ?? 0;
  if (topK === 0) {
    throw new Refusal(
      "node-llama-cpp exposes probabilities, not logits: only the top-k form (top_k > 0) can carry them",
    );
  }
  return topK;
}

// ---- sessions: a context sequence each -------------------------------------------------------

const sessions = new Map(); // session id -> {context, sequence, model}
let sessionsOpened = 0;

async function session_open(request) {
  const entry = await loadedModel(request.model);
  if (entry.vocabOnly) throw new Refusal("the GGUF is vocabulary-only: no weights to evaluate");
  const context = await entry.model.createContext({ contextSize: CONTEXT_SIZE, sequences: 1, threads: THREADS });
  sessionsOpened += 1;
  const id = `s${sessionsOpened}`;
  sessions.set(id, { context, sequence: context.getSequence(), model: entry.model });
  return id;
}

function sessionOf(request) {
  const session = sessions.get(request.session);
  if (session === undefined) throw new BadRequest(`no open session ${JSON.stringify(request.session)}`);
  return session;
}

async function session_append(request) {
  const session = sessionOf(request);
  const nVocab = session.model.fileInfo.metadata.tokenizer.ggml.tokens.length;
  const k = Math.min(topKOf(request), nVocab);
  const n = request.ids.length;
  if (n === 0) throw new BadRequest("session_append with no ids");
  const last = { generateNext: { probabilities: true, options: PLAIN_SOFTMAX } };
  const outputs = await session.sequence.controlledEvaluate(request.ids.map((id, i) => (i === n - 1 ? [id, last] : id)));
  const answer = outputs[n - 1];
  if (answer?.next?.probabilities === undefined) throw new Error("controlledEvaluate answered no probabilities");
  const ids = new Int32Array(k);
  const values = new Float32Array(k);
  const lse = new Float64Array(1);
  writeTopRow(answer.next.probabilities, nVocab, k, 0, ids, values, lse);
  return { n_past: session.sequence.nextTokenIndex, logits: topKForm(nVocab, 1, k, ids, values, lse) };
}

async function session_truncate(request) {
  const session = sessionOf(request);
  const held = session.sequence.nextTokenIndex;
  if (!(request.n >= 0 && request.n <= held)) {
    throw new BadRequest(`session_truncate to ${request.n} tokens: the session holds ${held}`);
  }
  if (request.n < held) await session.sequence.eraseContextTokenRanges([{ start: request.n, end: held }]);
  return session.sequence.nextTokenIndex;
}

async function session_close(request) {
  const session = sessions.get(request.session);
  sessions.delete(request.session);
  if (session !== undefined) await session.context.dispose();
  return null;
}

function generateParams(params) {
  const unknown = Object.keys(params).filter((key) => !(key in GENERATE_DEFAULTS) && key !== "window");
  if (unknown.length > 0) throw new Refusal(`unknown generate parameter(s): ${unknown.join(", ")}`);
  const resolved = { ...GENERATE_DEFAULTS, ...params };
  if (!(resolved.temperature < GREEDY_BELOW)) {
    throw new Refusal(
      "sampled generation is not reproducible here: node-llama-cpp draws with llama.cpp's RNG, not the protocol's random.Random(seed)",
    );
  }
  const neutral = resolved.repeat_penalty === 1 && resolved.frequency_penalty === 0 && resolved.presence_penalty === 0;
  if (!neutral) throw new Refusal("repetition penalties are not mapped onto node-llama-cpp's repeatPenalty by this adapter");
  return resolved;
}

/** The earliest start of any stop string in `bytes`, or -1. */
function stopStart(bytes, stops) {
  let earliest = -1;
  for (const stop of stops) {
    const at = bytes.indexOf(Buffer.from(stop, "utf8"));
    if (at !== -1 && (earliest === -1 || at < earliest)) earliest = at;
  }
  return earliest;
}

async function generate(request) {
  const params = generateParams(request.params ?? {});
  const { model, sequence } = await freshSequence(request.model);
  const stopTokens = new Set([model.eos, ...model.tokenize("<|im_end|>", true)].filter((t) => t != null));
  const generated = [];
  let bytes = Buffer.alloc(0);
  let finishReason = "length";
  if (params.max_tokens > 0) {
    const stream = sequence.evaluate(request.ids, { temperature: 0, yieldEogToken: true });
    for await (const token of stream) {
      if (stopTokens.has(token)) {
        finishReason = "stop_token";
        break;
      }
      generated.push(token);
      bytes = Buffer.from(model.detokenize(generated, true), "utf8");
      const cut = stopStart(bytes, params.stop);
      if (cut !== -1) {
        bytes = bytes.subarray(0, cut);
        finishReason = "stop_string";
        break;
      }
      if (generated.length >= params.max_tokens) break;
    }
  }
  return { ids: generated, bytes: bytes.toString("hex"), finish_reason: finishReason, text: bytes.toString("utf8") };
}

// ---- the protocol loop (../jsonl.mjs) ------------------------------------------------------

await serve(
  {
    engine: "node-llama-cpp",
    version: packageVersion(import.meta.resolve("node-llama-cpp")),
    capabilities: ["encode", "decode", "logits", "generate", "session"],
    classes: ["quantized"],
  },
  { encode, decode, logits, generate, session_open, session_append, session_truncate, session_close },
);
