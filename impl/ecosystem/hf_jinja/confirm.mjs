// Hand reproductions of the divergences the render gate found in @huggingface/jinja, with the
// library's public API alone (no specgate). Each expected value is a literal obtained by rendering
// the same template and context with transformers 5.24.0's compiled chat-template environment
// (transformers.utils.chat_template_utils._compile_jinja_template, jinja2 3.1.6).
// Exit 0 when every divergence still reproduces, 1 otherwise; one line per divergence.
//
//     node impl/ecosystem/hf_jinja/confirm.mjs

import { Template } from "@huggingface/jinja";

const DIVERGENCES = [
  {
    name: "str.strip(chars) ignores its argument (construct 01_str_strip_charset)",
    template: "{{ s.strip('xy') }}",
    context: { s: "xyhello worldyx" },
    reference: "hello world", // transformers 5.24.0
  },
  {
    name: "booleans print lowercase (constructs 16, 22-24, 39)",
    template: "{{ flag }}|{{ 1 is number }}",
    context: { flag: true },
    reference: "True|True", // transformers 5.24.0
  },
  {
    name: "length counts UTF-16 code units, not code points (construct 60_unicode_methods)",
    template: "{{ s | length }}",
    context: { s: "Straße 𝔘" },
    reference: "8", // transformers 5.24.0
  },
  {
    name: "none prints as the empty string (construct 40_undefined_printing)",
    template: "[{{ none }}][{{ n }}]",
    context: { n: null },
    reference: "[None][None]", // transformers 5.24.0
  },
  {
    name: "title()/capitalize leave the rest of each word as it was (constructs 12, 43)",
    template: "{{ s.title() }}|{{ s | capitalize }}",
    context: { s: "hello wOrld" },
    reference: "Hello World|Hello world", // transformers 5.24.0
  },
];

function engineOutput(template, context) {
  try {
    return new Template(template).render(context);
  } catch (error) {
    return `<error: ${error.message}>`;
  }
}

let allReproduce = true;
for (const { name, template, context, reference } of DIVERGENCES) {
  const got = engineOutput(template, context);
  const reproduces = got !== reference;
  allReproduce &&= reproduces;
  const verdict = reproduces ? "REPRODUCES" : "GONE";
  console.log(`${verdict}: ${name}: ${JSON.stringify(template)} -> engine ${JSON.stringify(got)}, reference ${JSON.stringify(reference)}`);
}
process.exit(allReproduce ? 0 : 1);
