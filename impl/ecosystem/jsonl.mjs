// The specgate-jsonl/1 loop (PROTOCOL.md) shared by the JavaScript adapters under
// impl/ecosystem/: handshake, one JSON request per stdin line, one JSON answer per stdout line,
// errors mapped onto the protocol's types. Node builtins only, so each adapter stays standalone
// apart from its own engine package; an adapter imports it as `../jsonl.mjs`.

import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** A stated limitation of the engine: answered as an `unsupported` error. */
export class Refusal extends Error {}

/** The run is not set up as PROTOCOL.md asks (a missing exported file): a `bad_request` error. */
export class SetupError extends Error {}

/** The request does not follow PROTOCOL.md (a session never opened): a `bad_request` error. */
export class BadRequest extends Error {}

/** The version in the package.json next to `entryUrl`'s folder (the adapter's own
 * `import.meta.resolve(name)`: resolution must start from the adapter's node_modules). */
export function packageVersion(entryUrl) {
  const entry = fileURLToPath(entryUrl);
  return JSON.parse(readFileSync(new URL("../package.json", `file://${entry}`), "utf8")).version;
}

async function answer(handlers, request) {
  const handler = handlers[request.op];
  if (handler === undefined) {
    return { id: request.id, error: { type: "bad_request", message: `unknown op ${JSON.stringify(request.op)}` } };
  }
  try {
    return { id: request.id, result: await handler(request) };
  } catch (error) {
    if (error instanceof Refusal) return { id: request.id, error: { type: "unsupported", message: error.message } };
    if (error instanceof SetupError || error instanceof BadRequest) return { id: request.id, error: { type: "bad_request", message: error.message } };
    process.stderr.write(`${error.stack}\n`);
    return { id: request.id, error: { type: "engine", message: `${error.name}: ${error.message}` } };
  }
}

function write(message) {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

/** Write the handshake `hello`, then answer each request with `handlers[op](request)` (its
 * value, or a promise of it, is the result) until `shutdown` or the end of stdin; then exit 0. */
export async function serve(hello, handlers) {
  write({ protocol: "specgate-jsonl/1", ...hello });
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (!line.trim()) continue;
    let request;
    try {
      request = JSON.parse(line);
    } catch (error) {
      write({ id: null, error: { type: "bad_request", message: `not JSON: ${error.message}` } });
      continue;
    }
    if (request.op === "shutdown") break;
    write(await answer(handlers, request));
  }
  process.exit(0);
}
