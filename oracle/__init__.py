"""specgate's reference implementation of the Qwen GGUF pipeline.

One concept per module, written to be read: GGUF reading, model dispatch,
chat-template rendering, tokenization, the forward pass, the sampler and the
decode loop. Imports only numpy, regex, jinja2 and gguf.
"""
